# For Packer 1.7 and later only (`packer init packer/plugins/`): installs the amazon plugin that
# packer/ballast.pkr.hcl uses. Kept apart from the template because Packer 1.6.6 (Debian 12's) rejects this
# block, and it bundles the amazon-ebs builder anyway. Not tried here: only Packer 1.6.6 is installable.
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.2.0"
    }
  }
}
