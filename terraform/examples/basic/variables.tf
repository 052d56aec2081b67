# project_id, prefix and queues come from queues.auto.tfvars.json, written by `pullqueue plan`;
# the module validates them.

variable "project_id" {
  description = "Project that holds the Pub/Sub resources and the service accounts."
  type        = string
}

variable "prefix" {
  description = "Prefix of every topic and subscription id (PULLQUEUE_PUBSUB_PREFIX for workers)."
  type        = string
  default     = ""
}

variable "queues" {
  description = "The pull queues, as written by `pullqueue plan` (see the module's variable of the same name)."
  type        = any
}
