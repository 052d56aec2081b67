# Terraform >= 1.9: the variable validations below compare one variable with another (the queue
# names with the id prefix), which earlier versions reject.
terraform {
  required_version = ">= 1.9"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}
