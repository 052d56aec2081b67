# Inputs of the pullqueue module. `pullqueue plan queue.yaml --project ID` writes project_id,
# prefix and queues from a legacy queue.yaml; the rest are set by the calling root module.

variable "project_id" {
  description = "Project that holds the topics and subscriptions (the X of pubsub://X)."
  type        = string

  validation {
    condition     = can(regex("^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project id: 6-30 lowercase letters, digits and hyphens, starting with a letter (optionally domain-scoped, example.com:my-project)."
  }
}

variable "project_number" {
  description = "Number of project_id. Left null, it is read with the google_project data source (needs resourcemanager.projects.get); it names the Pub/Sub service agent that dead-letters messages."
  type        = string
  default     = null

  validation {
    condition     = var.project_number == null || can(regex("^[0-9]{1,20}$", var.project_number))
    error_message = "project_number must be the project's decimal number (gcloud projects describe PROJECT --format='value(projectNumber)'), or null."
  }
}

variable "prefix" {
  description = "Prefix of every topic and subscription id; workers must use the same value (PULLQUEUE_PUBSUB_PREFIX). Needed when a queue name does not start with a letter or is shorter than 3 characters."
  type        = string
  default     = ""

  validation {
    condition     = var.prefix == "" || (can(regex("^[a-zA-Z][a-zA-Z0-9._~+%-]*$", var.prefix)) && !startswith(lower(var.prefix), "goog"))
    error_message = "prefix must be empty or start with a letter, use only letters, digits and . _ ~ + % -, and not start with 'goog'."
  }
}

variable "queues" {
  description = "The pull queues, keyed by legacy queue name. declared_tags get their own filtered subscription (PULLQUEUE_PUBSUB_DECLARED_TAGS); shards is the number of shard topics (label pullqueue-shards on the queue topic, which every worker reads); the other attributes tune the subscriptions workers pull from."
  type = map(object({
    declared_tags              = optional(list(string), [])
    shards                     = optional(number, 16)
    max_delivery_attempts      = optional(number, 100)
    ack_deadline_seconds       = optional(number, 60)
    message_retention_duration = optional(string, "2678400s")
    minimum_backoff            = optional(string)
    maximum_backoff            = optional(string)
    labels                     = optional(map(string), {})
  }))

  validation {
    condition     = alltrue([for name in keys(var.queues) : can(regex("^[a-zA-Z0-9-]{1,100}$", name))])
    error_message = "Queue names must be legacy queue names: 1-100 letters, digits and hyphens."
  }

  validation {
    condition = alltrue([
      for name in keys(var.queues) :
      can(regex("^[a-zA-Z][a-zA-Z0-9._~+%-]{2,}$", "${var.prefix}${name}")) && !startswith(lower("${var.prefix}${name}"), "goog")
    ])
    error_message = "With prefix \"${var.prefix}\", these queue names do not make valid Pub/Sub ids (3-255 characters, starting with a letter, not 'goog'): ${join(", ", [for name in keys(var.queues) : name if !can(regex("^[a-zA-Z][a-zA-Z0-9._~+%-]{2,}$", "${var.prefix}${name}")) || startswith(lower("${var.prefix}${name}"), "goog")])}. Set prefix (e.g. \"pq-\") here and PULLQUEUE_PUBSUB_PREFIX for the workers."
  }

  validation {
    condition = alltrue(flatten([
      for name, queue in var.queues : [
        for tag in queue.declared_tags : can(regex("^[a-zA-Z0-9._~+%-]{1,100}$", tag)) && length("${var.prefix}${name}-tag-${tag}") <= 255
      ]
    ]))
    error_message = "Declared tags must be 1-100 letters, digits or . _ ~ + % - (they name a subscription, <prefix><queue>-tag-<tag>, at most 255 characters); leave other tags undeclared: the worker subscription serves them."
  }

  validation {
    condition     = alltrue([for name in keys(var.queues) : length("${var.prefix}${name}-dead-letter") <= 255])
    error_message = "A prefix and queue name this long make subscription ids over Pub/Sub's 255 characters; use a shorter prefix."
  }

  validation {
    condition = alltrue([
      for queue in values(var.queues) :
      queue.max_delivery_attempts >= 5 && queue.max_delivery_attempts <= 100 && floor(queue.max_delivery_attempts) == queue.max_delivery_attempts
    ])
    error_message = "max_delivery_attempts must be a whole number from 5 to 100 (Pub/Sub's dead-letter limits); the legacy task_retry_limit counted leases the same way."
  }

  validation {
    condition = alltrue([
      for queue in values(var.queues) :
      queue.shards >= 1 && queue.shards <= 256 && floor(queue.shards) == queue.shards
    ])
    error_message = "shards must be a whole number from 1 to 256 (at least the number of worker processes leasing by tag at once). It is wire format: a task's shard is crc32(tag) mod shards, so never change it for a queue that holds tasks (docs/pubsub.md, 'Shard count')."
  }

  validation {
    condition = alltrue([
      for queue in values(var.queues) :
      queue.ack_deadline_seconds >= 10 && queue.ack_deadline_seconds <= 600 && floor(queue.ack_deadline_seconds) == queue.ack_deadline_seconds
    ])
    error_message = "ack_deadline_seconds must be a whole number from 10 to 600; leases longer than that are held by the workers' lease keeper, not by the subscription."
  }

  validation {
    condition = alltrue([
      for queue in values(var.queues) :
      can(regex("^[0-9]+s$", queue.message_retention_duration))
      && try(tonumber(trimsuffix(queue.message_retention_duration, "s")) >= 600, false)
      && try(tonumber(trimsuffix(queue.message_retention_duration, "s")) <= 2678400, false)
    ])
    error_message = "message_retention_duration must be whole seconds like \"2678400s\", from 600s (10 minutes) to 2678400s (31 days); keep it above the longest task ETA (legacy: 30 days)."
  }

  validation {
    condition = alltrue([
      for queue in values(var.queues) :
      (queue.minimum_backoff == null && queue.maximum_backoff == null) || (
        can(regex("^[0-9]+s$", queue.minimum_backoff)) && can(regex("^[0-9]+s$", queue.maximum_backoff))
        && try(tonumber(trimsuffix(queue.maximum_backoff, "s")) <= 600, false)
        && try(tonumber(trimsuffix(queue.minimum_backoff, "s")) <= tonumber(trimsuffix(queue.maximum_backoff, "s")), false)
      )
    ])
    error_message = "minimum_backoff and maximum_backoff are set together or not at all: whole seconds like \"10s\", 0s to 600s, with minimum_backoff <= maximum_backoff. Unset, a released lease comes back at once, as in the legacy queue."
  }

  validation {
    condition = alltrue(flatten([
      for queue in values(var.queues) : [
        for key, value in queue.labels : can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
      ]
    ]))
    error_message = "Queue labels must be GCP labels: keys start with a lowercase letter, keys and values use lowercase letters, digits, _ and -, at most 63 characters."
  }
}

variable "publisher_service_account" {
  description = "Email of the service account that adds tasks (the producer, and the migration's `pullqueue migrate`); it gets roles/pubsub.publisher on each queue's topic and nothing else."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9._-]+@[a-z0-9.-]+\\.gserviceaccount\\.com$", var.publisher_service_account))
    error_message = "publisher_service_account must be a service account email (NAME@PROJECT.iam.gserviceaccount.com, or PROJECT@appspot.gserviceaccount.com for App Engine's default account)."
  }
}

variable "worker_service_account" {
  description = "Email of the service account the workers run as; it gets roles/pubsub.subscriber on each queue's worker and declared-tag subscriptions, roles/pubsub.publisher on each queue's topic and dead-letter topic (grant_worker_publisher), and nothing else."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9._-]+@[a-z0-9.-]+\\.gserviceaccount\\.com$", var.worker_service_account))
    error_message = "worker_service_account must be a service account email (NAME@PROJECT.iam.gserviceaccount.com, or PROJECT@appspot.gserviceaccount.com for App Engine's default account)."
  }
}

variable "grant_worker_publisher" {
  description = "Grant the worker roles/pubsub.publisher on its queue's topic (to republish a task deferred to a far ETA before it is dead-lettered) and on its dead-letter topic (to set aside a message with attributes it cannot serve). Without it the worker keeps running and logs what it could not publish (docs/pubsub.md, Workers that may not publish)."
  type        = bool
  default     = true
}

variable "grant_worker_subscription_viewer" {
  description = "Also grant the worker roles/pubsub.viewer on its own subscriptions, so the adapter can check their filter and exactly-once delivery at start-up (without it, it logs that it cannot and carries on)."
  type        = bool
  default     = false
}

variable "dead_letter_readers" {
  description = "IAM members (group:ops@example.com, serviceAccount:...) who may read and ack the dead-letter subscriptions; none by default."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for member in var.dead_letter_readers : can(regex("^(user|group|serviceAccount|domain|principal|principalSet):.+$", member))])
    error_message = "dead_letter_readers must be IAM members such as group:ops@example.com or serviceAccount:NAME@PROJECT.iam.gserviceaccount.com."
  }
}

variable "labels" {
  description = "Labels on every topic and subscription (merged with managed-by = pullqueue and pullqueue-queue = <queue>)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key, value in var.labels : can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))])
    error_message = "labels must be GCP labels: keys start with a lowercase letter, keys and values use lowercase letters, digits, _ and -, at most 63 characters."
  }
}

variable "kms_key_name" {
  description = "Customer-managed key (projects/P/locations/L/keyRings/R/cryptoKeys/K) that encrypts the topics; the module grants the Pub/Sub service agent encrypt/decrypt on it. Null: Google-managed keys."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must be a Cloud KMS key name: projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY."
  }
}

variable "alerts" {
  description = "Cloud Monitoring alert policies per queue (null: none). oldest_unacked_age_seconds: alert when a task waits longer than this on any working subscription of the queue (workers falling behind or stopped); dead_letters: alert when the dead-letter subscription holds more than this many tasks; duration: how long a condition must hold before it fires; notification_channels: ids (projects/P/notificationChannels/N) to notify."
  type = object({
    notification_channels      = optional(list(string), [])
    oldest_unacked_age_seconds = optional(number, 3600)
    dead_letters               = optional(number, 0)
    duration                   = optional(string, "300s")
    enabled                    = optional(bool, true)
  })
  default = null

  validation {
    condition     = var.alerts == null || try(var.alerts.oldest_unacked_age_seconds >= 60 && floor(var.alerts.oldest_unacked_age_seconds) == var.alerts.oldest_unacked_age_seconds, false)
    error_message = "alerts.oldest_unacked_age_seconds must be whole seconds, at least 60 (Pub/Sub samples the age once a minute); keep it under the subscriptions' retention so the alert fires before tasks expire."
  }

  validation {
    condition     = var.alerts == null || try(var.alerts.dead_letters >= 0 && floor(var.alerts.dead_letters) == var.alerts.dead_letters, false)
    error_message = "alerts.dead_letters must be a whole number of tasks, 0 or more (0: alert on the first dead letter)."
  }

  validation {
    condition     = var.alerts == null || try(can(regex("^[0-9]+s$", var.alerts.duration)) && tonumber(trimsuffix(var.alerts.duration, "s")) <= 86400 && tonumber(trimsuffix(var.alerts.duration, "s")) % 60 == 0, false)
    error_message = "alerts.duration must be whole minutes in seconds like \"300s\", from \"0s\" to \"86400s\" (Monitoring's limit)."
  }

  validation {
    condition     = var.alerts == null || try(alltrue([for channel in var.alerts.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", channel))]), false)
    error_message = "alerts.notification_channels must be notification channel ids: projects/PROJECT/notificationChannels/ID (gcloud beta monitoring channels list)."
  }
}
