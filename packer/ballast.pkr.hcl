# Ballast's AMI: a base image, plus what images/install.sh bakes in (the components pinned in
# images/manifest.yaml for one Kubernetes minor version, nodeup, their units), checked by images/verify.sh.
#
# Works with Packer 1.6.6 (Debian 12's package), which bundles the amazon-ebs builder. Newer Packer needs the
# amazon plugin first: see packer/README.md (and packer/plugins/required_plugins.pkr.hcl).
#
#   packer build -var kubernetes_version=1.33 -var nodeup_binary=target/release/nodeup packer/ballast.pkr.hcl

variable "region" {
  type        = string
  default     = "us-west-2"
  description = "The region the AMI is built and registered in."
}

variable "kubernetes_version" {
  type        = string
  default     = "1.33"
  description = "The Kubernetes minor (1.33) or full version (1.33.4, which must be the one the manifest pins)."
}

variable "source_ami" {
  type        = string
  default     = ""
  description = "A base AMI id. Empty: the most recent AMI matching source_ami_name and source_ami_owner."
}

# Debian 12 (the default), from Debian's own account. Alternatives (set all three, plus ssh_username):
#   Ubuntu 24.04:       source_ami_name = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
#                       source_ami_owner = "099720109477" (Canonical), os_name = "ubuntu-24.04", ssh_username = "ubuntu"
#   Amazon Linux 2023:  source_ami_name = "al2023-ami-2023.*-kernel-*-x86_64"
#                       source_ami_owner = "137112412989" (Amazon), os_name = "al2023", ssh_username = "ec2-user"
variable "source_ami_name" {
  type    = string
  default = "debian-12-amd64-*"
}

variable "source_ami_owner" {
  type    = string
  default = "136693071363"
}

variable "os_name" {
  type        = string
  default     = "debian-12"
  description = "Names the base OS in the AMI's name and tags."
}

variable "ssh_username" {
  type    = string
  default = "admin"
}

variable "instance_type" {
  type    = string
  default = "t3.medium"
}

variable "ami_name" {
  type        = string
  default     = ""
  description = "Empty: ballast-k8s-<minor>-<os_name>, the name a cluster spec's default image refers to."
}

variable "force_deregister" {
  type        = bool
  default     = false
  description = "Replace an existing AMI of the same name (and delete its snapshot)."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Extra tags for the AMI and its snapshot; the manifest's versions are always added."
}

variable "nodeup_binary" {
  type        = string
  default     = ""
  description = "The nodeup to bake in, built for the base OS (e.g. on Debian 12). Empty: target/release/nodeup."
}

variable "artifact_source" {
  type        = string
  default     = "upstream"
  description = "Passed to install.sh --source on the build instance: upstream, or https://MIRROR."
}

variable "ssh_source_cidrs" {
  type        = list(string)
  default     = ["0.0.0.0/0"]
  description = "Who may reach the build instance's SSH port: narrow it to your own address."
}

variable "subnet_id" {
  type    = string
  default = ""
}

# "ssh" on AWS. "none" for the local cloud: nothing runs on the instance (the emulator's instances cannot be
# reached, and their public-looking IPs must never be), so the provisioners are skipped and the AMI is tagged
# ballast.dev/provisioned=false.
variable "communicator" {
  type    = string
  default = "ssh"
}

# For the local cloud (an AWS emulator); leave the defaults on AWS.
variable "custom_endpoint_ec2" {
  type    = string
  default = ""
}

variable "skip_region_validation" {
  type    = bool
  default = false
}

variable "skip_credential_validation" {
  type    = bool
  default = false
}

variable "skip_metadata_api_check" {
  type    = bool
  default = false
}

locals {
  root       = abspath(path.root)
  images_dir = "${local.root}/../images"
  # 1.33.4 -> 1.33 (Packer 1.6.6 has no regex functions).
  minor    = join(".", slice(split(".", var.kubernetes_version), 0, 2))
  manifest = yamldecode(file("${local.images_dir}/manifest.yaml"))
  release  = local.manifest.releases[local.minor]
  ami_name = var.ami_name != "" ? var.ami_name : "ballast-k8s-${local.minor}-${var.os_name}"
  nodeup   = var.nodeup_binary != "" ? var.nodeup_binary : "${local.root}/../target/release/nodeup"
  tags = merge(
    var.tags,
    { for name, component in local.release.components : "ballast.dev/${name}" => component.version },
    {
      "ballast.dev/kubernetes"      = local.release.kubernetes
      "ballast.dev/os"              = var.os_name
      "ballast.dev/manifest-sha256" = sha256(file("${local.images_dir}/manifest.yaml"))
      "ballast.dev/provisioned"     = var.communicator == "none" ? "false" : "true"
    },
  )
  # Skips what needs to reach the instance when there is no communicator.
  unreachable = var.communicator == "none" ? ["amazon-ebs.ballast"] : []
  remote      = "/tmp/ballast"
}

source "amazon-ebs" "ballast" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id
  source_ami    = var.source_ami
  dynamic "source_ami_filter" {
    for_each = var.source_ami == "" ? ["filter"] : []
    content {
      filters = {
        name                = var.source_ami_name
        architecture        = "x86_64"
        root-device-type    = "ebs"
        virtualization-type = "hvm"
      }
      owners      = [var.source_ami_owner]
      most_recent = true
    }
  }

  ami_name              = local.ami_name
  ami_description       = "Ballast node image: Kubernetes ${local.release.kubernetes} on ${var.os_name}"
  force_deregister      = var.force_deregister
  force_delete_snapshot = var.force_deregister
  ena_support           = true
  tags                  = local.tags
  snapshot_tags         = local.tags
  run_tags = {
    "Name"                    = "ballast-image-build"
    "ballast.dev/image-build" = local.ami_name
  }

  # The build instance's IMDS: Packer 1.6.6 cannot require IMDSv2 here; with the amazon plugin >= 1.0 add
  #   metadata_options { http_tokens = "required" }
  # (nodes themselves get IMDSv2-only from their launch templates, not from the AMI).

  communicator                          = var.communicator
  ssh_username                          = var.ssh_username
  temporary_security_group_source_cidrs = var.ssh_source_cidrs

  custom_endpoint_ec2        = var.custom_endpoint_ec2
  skip_region_validation     = var.skip_region_validation
  skip_credential_validation = var.skip_credential_validation
  skip_metadata_api_check    = var.skip_metadata_api_check
}

build {
  sources = ["source.amazon-ebs.ballast"]

  provisioner "shell" {
    except = local.unreachable
    inline = ["rm -rf ${local.remote}", "mkdir -p ${local.remote}/images"]
  }

  provisioner "file" {
    except      = local.unreachable
    source      = "${local.images_dir}/"
    destination = "${local.remote}/images"
  }

  provisioner "file" {
    except      = local.unreachable
    source      = local.nodeup
    destination = "${local.remote}/nodeup"
  }

  provisioner "shell" {
    except = local.unreachable
    inline = [
      "sudo sh ${local.remote}/images/install.sh --manifest ${local.remote}/images/manifest.yaml --kubernetes-version ${var.kubernetes_version} --source ${var.artifact_source} --nodeup ${local.remote}/nodeup",
      "sudo sh ${local.remote}/images/verify.sh --manifest ${local.remote}/images/manifest.yaml --kubernetes-version ${var.kubernetes_version}",
      "rm -rf ${local.remote}",
    ]
  }
}
