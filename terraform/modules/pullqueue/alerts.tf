# Optional Cloud Monitoring alerts per queue (var.alerts): a task waiting too long on any working
# subscription, and tasks piling up in the dead-letter subscription. The filters are the ones
# `pullqueue stats` reads (layout.tf, monitoring_filters); docs/operations.md says how to act.

resource "google_monitoring_alert_policy" "oldest_unacked_age" {
  for_each = var.alerts == null ? {} : local.monitoring_filters

  project               = var.project_id
  display_name          = "pullqueue ${each.key}: a task waits over ${var.alerts.oldest_unacked_age_seconds} s"
  combiner              = "OR"
  enabled               = var.alerts.enabled
  notification_channels = var.alerts.notification_channels
  user_labels           = local.queue_labels[each.key]

  conditions {
    display_name = "oldest unacked task age of ${each.key}"

    condition_threshold {
      filter          = each.value.oldest_unacked_age
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.oldest_unacked_age_seconds
      duration        = var.alerts.duration

      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }

      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Tasks of pull queue `${each.key}` wait longer than ${var.alerts.oldest_unacked_age_seconds} s: workers are too few, stopped, or failing. Look with `pullqueue stats ${each.key} --url pubsub://${var.project_id}` and the workers' metrics (docs/operations.md)."
  }
}

resource "google_monitoring_alert_policy" "dead_letters" {
  for_each = var.alerts == null ? {} : local.monitoring_filters

  project               = var.project_id
  display_name          = "pullqueue ${each.key}: over ${var.alerts.dead_letters} dead letters"
  combiner              = "OR"
  enabled               = var.alerts.enabled
  notification_channels = var.alerts.notification_channels
  user_labels           = local.queue_labels[each.key]

  conditions {
    display_name = "dead letters waiting for ${each.key}"

    condition_threshold {
      filter          = each.value.dead_letters
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.dead_letters
      duration        = var.alerts.duration

      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }

      trigger {
        count = 1
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Tasks of pull queue `${each.key}` ran out of delivery attempts and wait in its dead-letter subscription. See why with `pullqueue dead-letters ${each.key} --url pubsub://${var.project_id}`, fix the cause, then `--redrive` them (or `--purge`)."
  }
}
