# Cloud Scheduler runs the transactional outbox's sweep in the App Engine app (docs/operations.md,
# "Sweeping the transactional outbox"): the app mounts pullqueue.outbox.wsgi.sweep_app at
# var.sweep_path, and App Engine lets only its schedulers reach it.

terraform {
  required_version = ">= 1.3"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 4.50"
    }
  }
}

variable "project" {
  description = "The project of the App Engine app whose datastore holds the outbox."
  type        = string
}

variable "region" {
  description = "Cloud Scheduler's region (the App Engine app's region)."
  type        = string
}

variable "service" {
  description = "The App Engine service that mounts the sweep handler."
  type        = string
  default     = "default"
}

variable "sweep_path" {
  description = "Where the app mounts pullqueue.outbox.wsgi.sweep_app."
  type        = string
  default     = "/_pullqueue/sweep"
}

variable "schedule" {
  description = "How often to sweep (cron syntax): the period in the bound grace + period."
  type        = string
  default     = "*/5 * * * *"
}

resource "google_cloud_scheduler_job" "outbox_sweep" {
  project          = var.project
  region           = var.region
  name             = "pullqueue-outbox-sweep"
  description      = "Publishes the pull tasks a crash left staged by transactional adds."
  schedule         = var.schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "300s"

  retry_config {
    retry_count = 1
  }

  app_engine_http_target {
    http_method  = "GET"
    relative_uri = var.sweep_path
    app_engine_routing {
      service = var.service
    }
  }
}

output "job" {
  value = google_cloud_scheduler_job.outbox_sweep.id
}
