# What callers and workers need: the ids of what was created, and the worker environment that
# points pullqueue at it.

output "topic_ids" {
  description = "Topic id per queue (producers publish here)."
  value       = { for name, topic in google_pubsub_topic.queue : name => topic.name }
}

output "worker_subscription_ids" {
  description = "Worker subscription id per queue (every task except those of declared tags)."
  value       = { for name in keys(local.layout) : name => google_pubsub_subscription.pull["${name}/workers"].name }
}

output "tag_subscription_ids" {
  description = "Per queue, the subscription id of each declared tag."
  value = {
    for name, queue in local.layout : name => {
      for tag in keys(queue.tag_subscription_ids) : tag => google_pubsub_subscription.pull["${name}/tag/${tag}"].name
    }
  }
}

output "dead_letter_topic_ids" {
  description = "Dead-letter topic id per queue."
  value       = { for name, topic in google_pubsub_topic.dead_letter : name => topic.name }
}

output "dead_letter_subscription_ids" {
  description = "Dead-letter subscription id per queue (inspect or replay tasks that ran out of attempts)."
  value       = { for name, subscription in google_pubsub_subscription.dead_letter : name => subscription.name }
}

output "worker_environment" {
  description = "Environment for workers and producers: PULLQUEUE_URL, PULLQUEUE_PUBSUB_PREFIX, PULLQUEUE_PUBSUB_DECLARED_TAGS, and the smallest ack deadline, attempts and retention of any queue (assumed for subscriptions the worker may not read)."
  value       = local.worker_environment
}

output "alert_policy_ids" {
  description = "Per queue, the ids of its alert policies (oldest_unacked_age, dead_letters); empty when var.alerts is null."
  value = {
    for name in keys(local.monitoring_filters) : name => {
      oldest_unacked_age = try(google_monitoring_alert_policy.oldest_unacked_age[name].name, null)
      dead_letters       = try(google_monitoring_alert_policy.dead_letters[name].name, null)
    }
    if var.alerts != null
  }
}
