# Per pull queue: the topics producers publish to (the queue topic, and one per shard for tasks
# of undeclared tags), the subscriptions workers pull from (one filtered subscription per
# declared tag, one per shard, one worker subscription for every other task), and a
# dead-letter topic with its subscription. Ids and filters come from layout.tf; IAM is in iam.tf.

data "google_project" "this" {
  count      = var.project_number == null ? 1 : 0
  project_id = var.project_id
}

locals {
  project_number       = var.project_number != null ? var.project_number : data.google_project.this[0].number
  pubsub_service_agent = "serviceAccount:service-${local.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  # Label values are lowercase and at most 63 characters; queue names may be neither.
  queue_labels = {
    for name in keys(var.queues) : name => merge(
      var.labels,
      var.queues[name].labels,
      { "managed-by" = "pullqueue", "pullqueue-queue" = substr(lower(name), 0, 63) },
    )
  }
}

# The queue topic carries the queue's shard count (LABEL_SHARDS): every publisher and worker reads
# it when it opens the queue, so none needs to be told.
resource "google_pubsub_topic" "queue" {
  for_each = local.layout

  project      = var.project_id
  name         = each.value.topic_id
  labels       = merge(local.queue_labels[each.key], { "pullqueue-shards" = tostring(each.value.shards) })
  kms_key_name = var.kms_key_name

  depends_on = [google_kms_crypto_key_iam_member.pubsub_service_agent, terraform_data.layout_checks]
}

# The shard topics: producers publish tasks of undeclared tags to their tag's shard.
resource "google_pubsub_topic" "shard" {
  for_each = local.shard_topics

  project      = var.project_id
  name         = each.value.id
  labels       = local.queue_labels[each.value.queue]
  kms_key_name = var.kms_key_name

  depends_on = [google_kms_crypto_key_iam_member.pubsub_service_agent, terraform_data.layout_checks]
}

resource "google_pubsub_topic" "dead_letter" {
  for_each = local.layout

  project      = var.project_id
  name         = each.value.dead_letter_topic_id
  labels       = local.queue_labels[each.key]
  kms_key_name = var.kms_key_name

  depends_on = [google_kms_crypto_key_iam_member.pubsub_service_agent, terraform_data.layout_checks]
}

# Shard claims: one token message per shard, which workers hold (never acknowledge) while they
# drain that shard. Terraform cannot publish messages: the first worker that finds no token
# publishes them (and a worker republishes one that nears the end of the retention).
resource "google_pubsub_topic" "claims" {
  for_each = local.layout

  project      = var.project_id
  name         = each.value.claims_topic_id
  labels       = local.queue_labels[each.key]
  kms_key_name = var.kms_key_name

  depends_on = [google_kms_crypto_key_iam_member.pubsub_service_agent, terraform_data.layout_checks]
}

# No dead-letter policy: tokens are delivered again and again, by design.
resource "google_pubsub_subscription" "claims" {
  for_each = local.layout

  project                      = var.project_id
  name                         = each.value.claims_subscription_id
  topic                        = google_pubsub_topic.claims[each.key].id
  labels                       = local.queue_labels[each.key]
  ack_deadline_seconds         = 60
  enable_exactly_once_delivery = true
  message_retention_duration   = var.queues[each.key].message_retention_duration
  retain_acked_messages        = false

  expiration_policy {
    ttl = ""
  }
}

# Where tasks go after max_delivery_attempts leases: kept for the retention period, never lost.
resource "google_pubsub_subscription" "dead_letter" {
  for_each = local.layout

  project                    = var.project_id
  name                       = each.value.dead_letter_subscription_id
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  labels                     = local.queue_labels[each.key]
  ack_deadline_seconds       = 30 # DEAD_LETTER_ACK_DEADLINE: a killed `dead-letters` run's holds return soon
  message_retention_duration = var.queues[each.key].message_retention_duration
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }
}

# The subscriptions the adapter leases from. A changed filter (declaring or undeclaring a tag)
# replaces the subscription and drops the messages waiting in it: drain the queue first.
resource "google_pubsub_subscription" "pull" {
  for_each = local.pull_subscriptions

  project                      = var.project_id
  name                         = each.value.id
  topic                        = lookup(google_pubsub_topic.shard, each.key, google_pubsub_topic.queue[each.value.queue]).id
  filter                       = each.value.filter == "" ? null : each.value.filter
  labels                       = local.queue_labels[each.value.queue]
  ack_deadline_seconds         = var.queues[each.value.queue].ack_deadline_seconds
  enable_exactly_once_delivery = true
  enable_message_ordering      = false
  message_retention_duration   = var.queues[each.value.queue].message_retention_duration
  retain_acked_messages        = false

  expiration_policy {
    ttl = ""
  }

  # No retry policy by default: a lease released with modify_lease(0) is available again at
  # once, as in the legacy queue. Setting both backoffs trades that for a redelivery backoff.
  dynamic "retry_policy" {
    for_each = var.queues[each.value.queue].minimum_backoff == null ? [] : [var.queues[each.value.queue]]
    content {
      minimum_backoff = retry_policy.value.minimum_backoff
      maximum_backoff = retry_policy.value.maximum_backoff
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.value.queue].id
    max_delivery_attempts = var.queues[each.value.queue].max_delivery_attempts
  }

  # Without these grants Pub/Sub cannot move a message to the dead-letter topic.
  depends_on = [google_pubsub_topic_iam_member.dead_letter_publisher]
}
