# The Pub/Sub ids and filters of every queue: the HCL twin of pullqueue/adapters/pubsub/layout.py,
# which the adapter reads. tests/test_terraform_layout.py evaluates this file with Terraform and
# checks every id and filter against QueueLayout, so keep the two in step.
#
# This file holds only locals and a built-in terraform_data check (no provider), so the test can
# run it alone.

locals {
  # Shard topics per queue (var.queues[*].shards, default SHARDS = 16): a task of an undeclared
  # tag is published to shard crc32(UTF-8 tag) mod shards. Wire format: the queue topic carries
  # the count in its pullqueue-shards label (LABEL_SHARDS); never change it for a queue that
  # holds tasks.
  shards = { for name, queue in var.queues : name => queue.shards }

  # Declared tags, distinct and sorted: worker_filter() in Python sorts them the same way.
  declared_tags = { for name, queue in var.queues : name => sort(distinct(queue.declared_tags)) }

  layout = {
    for name, tags in local.declared_tags : name => {
      topic_id                    = format("%s%s", var.prefix, name)             # TOPIC_FORMAT
      worker_subscription_id      = format("%s%s-workers", var.prefix, name)     # WORKER_SUBSCRIPTION_FORMAT
      dead_letter_topic_id        = format("%s%s-dead-letter", var.prefix, name) # DEAD_LETTER_TOPIC_FORMAT
      dead_letter_subscription_id = format("%s%s-dead-letter", var.prefix, name) # DEAD_LETTER_SUBSCRIPTION_FORMAT
      shards                      = local.shards[name]
      shard_topic_ids             = [for k in range(local.shards[name]) : format("%s%s-shard-%d", var.prefix, name, k)] # SHARD_TOPIC_FORMAT
      shard_subscription_ids      = [for k in range(local.shards[name]) : format("%s%s-shard-%d", var.prefix, name, k)] # SHARD_SUBSCRIPTION_FORMAT
      claims_topic_id             = format("%s%s-claims", var.prefix, name)                                             # CLAIMS_TOPIC_FORMAT
      claims_subscription_id      = format("%s%s-claims", var.prefix, name)                                             # CLAIMS_SUBSCRIPTION_FORMAT
      tag_subscription_ids = {
        for tag in tags : tag => format("%s%s-tag-%s", var.prefix, name, tag) # TAG_SUBSCRIPTION_FORMAT
      }
      tag_filters = {
        for tag in tags : tag => format("attributes.tag = \"%s\"", tag) # tag_filter()
      }
      # worker_filter(): every task except those of declared tags; "" when none is declared.
      worker_filter = (
        length(tags) == 0 ? "" :
        length(tags) == 1 ? format("NOT attributes:tag OR attributes.tag != \"%s\"", tags[0]) :
        format("NOT attributes:tag OR (%s)", join(" AND ", [for tag in tags : format("attributes.tag != \"%s\"", tag)]))
      )
    }
  }

  # Every shard topic, keyed "<queue>/shard/<k>".
  shard_topics = merge([
    for name, queue in local.layout : {
      for k, id in queue.shard_topic_ids : "${name}/shard/${k}" => { queue = name, id = id }
    }
  ]...)

  # Every subscription workers pull from (the worker one, one per declared tag, one per shard),
  # keyed "<queue>/workers", "<queue>/tag/<tag>" and "<queue>/shard/<k>", with the id of the topic
  # it reads. They share one definition in main.tf.
  pull_subscriptions = merge(
    {
      for name, queue in local.layout : "${name}/workers" => {
        queue    = name
        id       = queue.worker_subscription_id
        filter   = queue.worker_filter
        topic_id = queue.topic_id
      }
    },
    merge([
      for name, queue in local.layout : {
        for tag, id in queue.tag_subscription_ids : "${name}/tag/${tag}" => {
          queue    = name
          id       = id
          filter   = queue.tag_filters[tag]
          topic_id = queue.topic_id
        }
      }
    ]...),
    merge([
      for name, queue in local.layout : {
        for k, id in queue.shard_subscription_ids : "${name}/shard/${k}" => {
          queue    = name
          id       = id
          filter   = ""
          topic_id = queue.shard_topic_ids[k]
        }
      }
    ]...)
  )

  # The environment a worker needs to find these resources (pullqueue.config.Settings). The last
  # three are what the adapter assumes when it may not read a subscription: the smallest value
  # of any queue (and at most Pub/Sub's maximum), so the assumption never exceeds the real one.
  worker_environment = {
    PULLQUEUE_URL                          = "pubsub://${var.project_id}"
    PULLQUEUE_PUBSUB_PREFIX                = var.prefix
    PULLQUEUE_PUBSUB_DECLARED_TAGS         = jsonencode({ for name, tags in local.declared_tags : name => tags if length(tags) > 0 })
    PULLQUEUE_PUBSUB_ACK_DEADLINE          = tostring(min(600, [for queue in values(var.queues) : queue.ack_deadline_seconds]...))
    PULLQUEUE_PUBSUB_MAX_DELIVERY_ATTEMPTS = tostring(min(100, [for queue in values(var.queues) : queue.max_delivery_attempts]...))
    PULLQUEUE_PUBSUB_RETENTION_SECONDS = tostring(min(2678400, [
      for queue in values(var.queues) : tonumber(trimsuffix(queue.message_retention_duration, "s"))
    ]...))
  }

  # The Cloud Monitoring filters of a queue's subscriptions, byte for byte what `pullqueue stats`
  # queries (pullqueue/monitoring.py: series_filter over layout_subscriptions): the working
  # subscriptions (the worker one, then declared tags in order, then the shards) and the
  # dead-letter one. alerts.tf watches the same series.
  monitoring_subscriptions = {
    for name, queue in local.layout : name => {
      working     = concat([queue.worker_subscription_id], values(queue.tag_subscription_ids), queue.shard_subscription_ids)
      dead_letter = [queue.dead_letter_subscription_id]
    }
  }
  monitoring_filters = {
    for name, subs in local.monitoring_subscriptions : name => {
      oldest_unacked_age = format(
        "metric.type = \"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type = \"pubsub_subscription\" AND resource.labels.subscription_id = one_of(%s)",
        join(", ", [for id in subs.working : format("\"%s\"", id)]),
      )
      dead_letters = format(
        "metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type = \"pubsub_subscription\" AND resource.labels.subscription_id = one_of(%s)",
        join(", ", [for id in subs.dead_letter : format("\"%s\"", id)]),
      )
    }
  }

  all_topic_ids        = flatten([for queue in values(local.layout) : [queue.topic_id, queue.dead_letter_topic_id, queue.claims_topic_id, queue.shard_topic_ids]])
  all_subscription_ids = concat([for sub in values(local.pull_subscriptions) : sub.id], [for queue in values(local.layout) : queue.dead_letter_subscription_id], [for queue in values(local.layout) : queue.claims_subscription_id])
}

# Checks that need the computed ids (a variable validation cannot read locals built from itself).
resource "terraform_data" "layout_checks" {
  input = local.all_topic_ids

  lifecycle {
    precondition {
      condition     = alltrue([for sub in values(local.pull_subscriptions) : length(sub.filter) <= 256])
      error_message = "Pub/Sub filters are at most 256 bytes; too many declared tags on: ${join(", ", distinct([for sub in values(local.pull_subscriptions) : sub.queue if length(sub.filter) > 256]))}. Declare fewer tags (undeclared tags are served by the worker subscription)."
    }
    precondition {
      condition     = length(distinct(local.all_topic_ids)) == length(local.all_topic_ids)
      error_message = "Two queues map to the same topic id (a queue named like another queue's dead-letter topic, <queue>-dead-letter): ${join(", ", [for id in distinct(local.all_topic_ids) : id if length([for other in local.all_topic_ids : other if other == id]) > 1])}. Rename one queue."
    }
    precondition {
      condition     = length(distinct(local.all_subscription_ids)) == length(local.all_subscription_ids)
      error_message = "Two subscriptions get the same id (queue names overlap with another queue's -workers, -tag-<tag> or -dead-letter suffix): ${join(", ", [for id in distinct(local.all_subscription_ids) : id if length([for other in local.all_subscription_ids : other if other == id]) > 1])}. Rename a queue or a declared tag."
    }
  }
}
