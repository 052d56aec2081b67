output "topic_ids" {
  description = "Topic id per queue."
  value       = module.pullqueue.topic_ids
}

output "worker_subscription_ids" {
  description = "Worker subscription id per queue."
  value       = module.pullqueue.worker_subscription_ids
}

output "tag_subscription_ids" {
  description = "Declared-tag subscription ids per queue."
  value       = module.pullqueue.tag_subscription_ids
}

output "dead_letter_subscription_ids" {
  description = "Dead-letter subscription id per queue."
  value       = module.pullqueue.dead_letter_subscription_ids
}

output "worker_environment" {
  description = "Set these in the workers' and producers' environment."
  value       = module.pullqueue.worker_environment
}
