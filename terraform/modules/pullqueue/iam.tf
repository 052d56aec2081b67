# Least-privilege IAM, every grant on one resource and additive (iam_member): the publisher may
# publish to the queues' topics, the workers may pull from their subscriptions and publish to
# their own queue's two topics, and the Pub/Sub service agent gets exactly what dead-lettering
# and CMEK need.

resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = local.layout

  project = var.project_id
  topic   = google_pubsub_topic.queue[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.publisher_service_account}"
}

# Publishers and workers read the queue topic's pullqueue-shards label (the queue's shard
# count) when they open the queue: roles/pubsub.viewer on that topic alone.
resource "google_pubsub_topic_iam_member" "publisher_shard_count" {
  for_each = local.layout

  project = var.project_id
  topic   = google_pubsub_topic.queue[each.key].name
  role    = "roles/pubsub.viewer"
  member  = "serviceAccount:${var.publisher_service_account}"
}

resource "google_pubsub_topic_iam_member" "worker_shard_count" {
  for_each = local.layout

  project = var.project_id
  topic   = google_pubsub_topic.queue[each.key].name
  role    = "roles/pubsub.viewer"
  member  = "serviceAccount:${var.worker_service_account}"
}

resource "google_pubsub_topic_iam_member" "shard_publisher" {
  for_each = local.shard_topics

  project = var.project_id
  topic   = google_pubsub_topic.shard[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.publisher_service_account}"
}

resource "google_pubsub_subscription_iam_member" "worker" {
  for_each = local.pull_subscriptions

  project      = var.project_id
  subscription = google_pubsub_subscription.pull[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${var.worker_service_account}"
}

# Workers publish too: a task hidden until a far ETA is republished before Pub/Sub would
# dead-letter it or its retention would run out, and a message whose attributes no worker may
# serve (a foreign publisher's) is set aside on the dead-letter topic. Only the worker's own
# queue's topics (its shard topics too) and dead-letter topic; off, the adapter works on and
# logs what it cannot do.
resource "google_pubsub_topic_iam_member" "worker_republish" {
  for_each = var.grant_worker_publisher ? local.layout : {}

  project = var.project_id
  topic   = google_pubsub_topic.queue[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.worker_service_account}"
}

resource "google_pubsub_topic_iam_member" "worker_republish_shard" {
  for_each = var.grant_worker_publisher ? local.shard_topics : {}

  project = var.project_id
  topic   = google_pubsub_topic.shard[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.worker_service_account}"
}

resource "google_pubsub_topic_iam_member" "worker_set_aside" {
  for_each = var.grant_worker_publisher ? local.layout : {}

  project = var.project_id
  topic   = google_pubsub_topic.dead_letter[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.worker_service_account}"
}

# Workers hold shard tokens on the claims subscription and publish missing ones.
resource "google_pubsub_subscription_iam_member" "worker_claims" {
  for_each = local.layout

  project      = var.project_id
  subscription = google_pubsub_subscription.claims[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${var.worker_service_account}"
}

resource "google_pubsub_topic_iam_member" "worker_claims_publisher" {
  for_each = local.layout

  project = var.project_id
  topic   = google_pubsub_topic.claims[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${var.worker_service_account}"
}

# Opt-in: lets the adapter read its subscriptions to verify the filter and exactly-once delivery
# and to learn the ack deadline; without it the adapter logs a warning and trusts the layout.
resource "google_pubsub_subscription_iam_member" "worker_viewer" {
  for_each = { for key, sub in local.pull_subscriptions : key => sub if var.grant_worker_subscription_viewer }

  project      = var.project_id
  subscription = google_pubsub_subscription.pull[each.key].name
  role         = "roles/pubsub.viewer"
  member       = "serviceAccount:${var.worker_service_account}"
}

# Dead-lettering: the service agent publishes to the dead-letter topic and acks the message on
# the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.layout

  project = var.project_id
  topic   = google_pubsub_topic.dead_letter[each.key].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_source" {
  for_each = local.pull_subscriptions

  project      = var.project_id
  subscription = google_pubsub_subscription.pull[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_reader" {
  for_each = {
    for pair in setproduct(keys(local.layout), var.dead_letter_readers) : "${pair[0]}/${pair[1]}" => {
      queue  = pair[0]
      member = pair[1]
    }
  }

  project      = var.project_id
  subscription = google_pubsub_subscription.dead_letter[each.value.queue].name
  role         = "roles/pubsub.subscriber"
  member       = each.value.member
}

# CMEK: the service agent encrypts and decrypts the topics' messages with the key.
resource "google_kms_crypto_key_iam_member" "pubsub_service_agent" {
  count = var.kms_key_name == null ? 0 : 1

  crypto_key_id = var.kms_key_name
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = local.pubsub_service_agent
}
