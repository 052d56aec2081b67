# Named-task deduplication (docs/dedupe.md): with PULLQUEUE_DEDUPE_URL=firestore://PROJECT, task
# names live in a Firestore collection and deleted names stay as tombstones whose `expire_at`
# says when they may be reused. pullqueue checks `expire_at` itself, so names are free on time
# without this policy; the TTL policy only deletes the expired documents (lazily, typically
# within a day) so the collection does not grow forever. Off by default: the Firestore database
# may belong to another team's state.

variable "enable_dedupe_ttl" {
  description = "Create the Firestore TTL policy on the task-name registry's `expire_at` field, so expired tombstones are deleted (PULLQUEUE_DEDUPE_URL=firestore://...)."
  type        = bool
  default     = false
}

variable "dedupe_database" {
  description = "Firestore database of the task-name registry: the DATABASE of firestore://PROJECT/DATABASE (\"(default)\" when the URL has none). It must exist, in Native mode."
  type        = string
  default     = "(default)"

  validation {
    condition     = var.dedupe_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.dedupe_database))
    error_message = "dedupe_database must be \"(default)\" or a Firestore database id: 4-63 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "dedupe_collection" {
  description = "Collection of the task-name registry: pullqueue_names unless the registry URL sets ?collection=NAME."
  type        = string
  default     = "pullqueue_names"

  validation {
    condition     = can(regex("^[^/]{1,1500}$", var.dedupe_collection)) && !can(regex("^__.*__$", var.dedupe_collection))
    error_message = "dedupe_collection must be a Firestore collection id: no '/', not of the reserved form __NAME__."
  }
}

# The TTL field is also left out of single-field indexes: the registry never queries it, and an
# indexed, steadily increasing timestamp limits the collection's write rate.
resource "google_firestore_field" "dedupe_tombstone_ttl" {
  count = var.enable_dedupe_ttl ? 1 : 0

  project    = var.project_id
  database   = var.dedupe_database
  collection = var.dedupe_collection
  field      = "expire_at"

  ttl_config {}

  index_config {}
}

output "dedupe_ttl_field" {
  description = "The Firestore field holding the tombstone TTL policy (null when enable_dedupe_ttl is false)."
  value       = var.enable_dedupe_ttl ? google_firestore_field.dedupe_tombstone_ttl[0].name : null
}
