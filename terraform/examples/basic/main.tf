# A root module that provisions the Pub/Sub side of a legacy app's pull queues: two service
# accounts (one that adds tasks, one the workers run as) and the pullqueue module.

terraform {
  required_version = ">= 1.9"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}

provider "google" {
  project = var.project_id
}

resource "google_project_service" "pubsub" {
  service            = "pubsub.googleapis.com"
  disable_on_destroy = false
}

resource "google_service_account" "publisher" {
  account_id   = "pullqueue-publisher"
  display_name = "Adds tasks to the pull queues"
}

resource "google_service_account" "worker" {
  account_id   = "pullqueue-worker"
  display_name = "Leases and deletes pull-queue tasks"
}

module "pullqueue" {
  source = "../../modules/pullqueue"

  project_id                = var.project_id
  prefix                    = var.prefix
  queues                    = var.queues
  publisher_service_account = google_service_account.publisher.email
  worker_service_account    = google_service_account.worker.email
  labels                    = { app = "reports" }

  depends_on = [google_project_service.pubsub]
}
