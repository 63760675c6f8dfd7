output "api_lb_dns_name" {
  value = aws_lb.api-prod-k8s-example-or-758ffc84.dns_name
}

output "cluster_name" {
  value = "prod.k8s.example.org"
}

output "master_security_group_ids" {
  value = [aws_security_group.control-plane-prod-k8s-example-org.id]
}

output "masters_role_arn" {
  value = aws_iam_role.control-plane-prod-k8s-example-org.arn
}

output "masters_role_name" {
  value = aws_iam_role.control-plane-prod-k8s-example-org.name
}

output "node_security_group_ids" {
  value = [aws_security_group.nodes-prod-k8s-example-org.id]
}

output "node_subnet_ids" {
  value = ["subnet-0123456789abcdef0"]
}

output "nodes_role_arn" {
  value = aws_iam_role.nodes-prod-k8s-example-org.arn
}

output "nodes_role_name" {
  value = aws_iam_role.nodes-prod-k8s-example-org.name
}

output "region" {
  value = "eu-central-1"
}

output "subnet_ids" {
  value = ["subnet-0123456789abcdef0", aws_subnet.utility-a-prod-k8s-example-org.id]
}

output "subnet_private-a_id" {
  value = "subnet-0123456789abcdef0"
}

output "subnet_utility-a_id" {
  value = aws_subnet.utility-a-prod-k8s-example-org.id
}

output "vpc_id" {
  value = "vpc-0123456789abcdef0"
}

provider "aws" {
  region = "eu-central-1"
}

data "aws_ami" "ami-0123456789abcdef0" {
  most_recent = true

  filter {
    name   = "image-id"
    values = ["ami-0123456789abcdef0"]
  }
}

data "aws_ami" "ballast-k8s-1-32-debian-12" {
  most_recent = true

  filter {
    name   = "name"
    values = ["ballast-k8s-1.32-debian-12"]
  }
}

resource "aws_autoscaling_group" "control-plane-a-prod-k8s-example-org" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-a.prod.k8s.example.org"
  target_group_arns   = [aws_lb_target_group.tcp-prod-k8s-example-or-758ffc84.arn]
  vpc_zone_identifier = ["subnet-0123456789abcdef0"]

  launch_template {
    id      = aws_launch_template.control-plane-a-prod-k8s-example-org.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-a.prod.k8s.example.org"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "prod.k8s.example.org"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "control-plane-a"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "control-plane"
  }

  tag {
    key                 = "cost-center"
    propagate_at_launch = true
    value               = "1234"
  }

  tag {
    key                 = "kubernetes.io/cluster/prod.k8s.example.org"
    propagate_at_launch = true
    value               = "owned"
  }

  tag {
    key                 = "team"
    propagate_at_launch = true
    value               = "platform"
  }
}

resource "aws_autoscaling_group" "gpu-prod-k8s-example-org" {
  desired_capacity    = 0
  max_size            = 4
  min_size            = 0
  name                = "gpu.prod.k8s.example.org"
  vpc_zone_identifier = ["subnet-0123456789abcdef0"]

  launch_template {
    id      = aws_launch_template.gpu-prod-k8s-example-org.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "gpu.prod.k8s.example.org"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "prod.k8s.example.org"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "gpu"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "node"
  }

  tag {
    key                 = "cost-center"
    propagate_at_launch = true
    value               = "1234"
  }

  tag {
    key                 = "kubernetes.io/cluster/prod.k8s.example.org"
    propagate_at_launch = true
    value               = "owned"
  }

  tag {
    key                 = "team"
    propagate_at_launch = true
    value               = "ml"
  }
}

resource "aws_ebs_volume" "a-etcd-prod-k8s-example-org" {
  availability_zone = "eu-central-1a"
  encrypted         = true
  kms_key_id        = "arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  size              = 20
  tags = {
    "Name"                                       = "a.etcd.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-kms-key"                   = "arn:aws:kms:eu-central-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    "ballast.dev/etcd-member"                    = "a"
    "ballast.dev/instance-group"                 = "control-plane-a"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  type = "gp3"
}

resource "aws_ec2_tag" "subnet-0123456789abcdef0-shared-tag" {
  key         = "kubernetes.io/cluster/prod.k8s.example.org"
  resource_id = "subnet-0123456789abcdef0"
  value       = "shared"
}

resource "aws_ec2_tag" "vpc-0123456789abcdef0-shared-tag" {
  key         = "kubernetes.io/cluster/prod.k8s.example.org"
  resource_id = "vpc-0123456789abcdef0"
  value       = "shared"
}

resource "aws_iam_instance_profile" "control-plane-prod-k8s-example-org" {
  name = "control-plane.prod.k8s.example.org"
  role = aws_iam_role.control-plane-prod-k8s-example-org.name
}

resource "aws_iam_instance_profile" "nodes-prod-k8s-example-org" {
  name = "nodes.prod.k8s.example.org"
  role = aws_iam_role.nodes-prod-k8s-example-org.name
}

resource "aws_iam_role" "control-plane-prod-k8s-example-org" {
  assume_role_policy   = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name                 = "control-plane.prod.k8s.example.org"
  permissions_boundary = "arn:aws:iam::123456789012:policy/boundary"
  tags = {
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
}

resource "aws_iam_role" "nodes-prod-k8s-example-org" {
  assume_role_policy   = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name                 = "nodes.prod.k8s.example.org"
  permissions_boundary = "arn:aws:iam::123456789012:policy/boundary"
  tags = {
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
}

resource "aws_iam_role_policy" "control-plane-prod-k8s-example-org" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/*\"],\"Sid\":\"ReadClusterState\"},{\"Action\":[\"s3:PutObject\",\"s3:DeleteObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/etcd/*\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/control-plane/node-bootstrap.json\"],\"Sid\":\"WriteEtcd\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"s3:ListBucket\"],\"Condition\":{\"StringLike\":{\"s3:prefix\":[\"clusters/prod.k8s.example.org/*\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state\"],\"Sid\":\"ListClusterState\"},{\"Action\":[\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"autoscaling:DescribeAutoScalingGroups\",\"autoscaling:DescribeAutoScalingInstances\",\"elasticloadbalancing:DescribeLoadBalancers\",\"elasticloadbalancing:DescribeTargetGroups\",\"elasticloadbalancing:DescribeTargetHealth\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DiscoverPeers\"},{\"Action\":[\"iam:GetInstanceProfile\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"VerifyNodeProfiles\"},{\"Action\":[\"ec2:DescribeVolumes\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"FindEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"AttachOwnEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/ballast.dev/role\":\"control-plane\",\"ec2:ResourceTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"AttachToOwnControlPlane\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeRegions\",\"ec2:DescribeRouteTables\",\"ec2:DescribeSecurityGroups\",\"ec2:DescribeSubnets\",\"ec2:DescribeVolumes\",\"ec2:DescribeVpcs\",\"elasticloadbalancing:Describe*\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerRead\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:vpc/*\"],\"Sid\":\"CloudControllerCreateSecurityGroupInVpc\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerCreateOwnedSecurityGroups\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\",\"ec2:CreateAction\":[\"CreateSecurityGroup\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerTagNewSecurityGroups\"},{\"Action\":[\"elasticloadbalancing:CreateLoadBalancer\",\"elasticloadbalancing:CreateTargetGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerCreateOwnedLoadBalancers\"},{\"Action\":[\"elasticloadbalancing:AddTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\",\"elasticloadbalancing:CreateAction\":[\"CreateLoadBalancer\",\"CreateTargetGroup\"]}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerTagNewLoadBalancers\"},{\"Action\":[\"ec2:AuthorizeSecurityGroupIngress\",\"ec2:DeleteSecurityGroup\",\"ec2:RevokeSecurityGroupIngress\",\"elasticloadbalancing:AddTags\",\"elasticloadbalancing:ApplySecurityGroupsToLoadBalancer\",\"elasticloadbalancing:AttachLoadBalancerToSubnets\",\"elasticloadbalancing:ConfigureHealthCheck\",\"elasticloadbalancing:CreateListener\",\"elasticloadbalancing:CreateLoadBalancerListeners\",\"elasticloadbalancing:CreateLoadBalancerPolicy\",\"elasticloadbalancing:DeleteListener\",\"elasticloadbalancing:DeleteLoadBalancer\",\"elasticloadbalancing:DeleteLoadBalancerListeners\",\"elasticloadbalancing:DeleteTargetGroup\",\"elasticloadbalancing:DeregisterInstancesFromLoadBalancer\",\"elasticloadbalancing:DeregisterTargets\",\"elasticloadbalancing:DetachLoadBalancerFromSubnets\",\"elasticloadbalancing:ModifyListener\",\"elasticloadbalancing:ModifyLoadBalancerAttributes\",\"elasticloadbalancing:ModifyTargetGroup\",\"elasticloadbalancing:RegisterInstancesWithLoadBalancer\",\"elasticloadbalancing:RegisterTargets\",\"elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer\",\"elasticloadbalancing:SetLoadBalancerPoliciesOfListener\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerManageOwned\"},{\"Action\":[\"iam:CreateServiceLinkedRole\"],\"Condition\":{\"StringEquals\":{\"iam:AWSServiceName\":\"elasticloadbalancing.amazonaws.com\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*\"],\"Sid\":\"CloudControllerElbServiceLinkedRole\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"ec2:DescribeVolumes\",\"ec2:DescribeVolumesModifications\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"EbsCsiRead\"},{\"Action\":[\"ec2:CreateVolume\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiCreateOwnedVolumes\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\",\"ec2:CreateAction\":[\"CreateVolume\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiTagNewVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\",\"ec2:ModifyVolume\",\"ec2:DeleteVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:ResourceTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiManageOwnedVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/prod.k8s.example.org\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"EbsCsiAttachToOwnInstances\"},{\"Action\":[\"s3:PutObject\"],\"Condition\":{\"Null\":{\"s3:if-none-match\":\"false\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/audit/$${aws:userid}/*\"],\"Sid\":\"ShipOwnAuditLog\"},{\"Action\":[\"s3:GetObject\",\"s3:GetObjectVersion\"],\"Effect\":\"Deny\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/audit/*\"],\"Sid\":\"NeverReadAuditLog\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.control-plane-prod-k8s-example-org.name
}

resource "aws_iam_role_policy" "nodes-prod-k8s-example-org" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/nodes/gpu/*\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/pki/kubernetes-ca/cert.pem\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/pki/kubernetes-ca/*/cert.pem\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/control-plane/node-bootstrap.json\"],\"Sid\":\"ReadNodeSpecs\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/prod.k8s.example.org/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/prod.k8s.example.org/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"ec2:DescribeInstances\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DescribeSelf\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.nodes-prod-k8s-example-org.name
}

resource "aws_launch_template" "control-plane-a-prod-k8s-example-org" {
  image_id      = "ami-0123456789abcdef0"
  instance_type = "m6i.large"
  name          = "control-plane-a.prod.k8s.example.org"
  tags = {
    "Name"                                       = "control-plane-a.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                 = "control-plane-a"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogcHJvZC5rOHMuZXhhbXBsZS5vcmcKaW5zdGFuY2VHcm91cDogY29udHJvbC1wbGFuZS1hCnJvbGU6IENvbnRyb2xQbGFuZQpzdGF0ZVN0b3JlOiBzMzovL3N0YXRlL2NsdXN0ZXJzCm5vZGVTcGVjOiBwcm9kLms4cy5leGFtcGxlLm9yZy9ub2Rlcy9jb250cm9sLXBsYW5lLWEvc3BlYy55YW1sCm5vZGVTcGVjU2hhMjU2OiAyMjgwOGUxNTIzOWIxZjlkMzBjMDFmZTYyMTE3ZjgzNGYzMGM3NzcxMjIyZTI0NDcwMWNjYjQyNzExOTBiNzZmCg=="

  block_device_mappings {
    device_name = data.aws_ami.ami-0123456789abcdef0.root_device_name

    ebs {
      delete_on_termination = true
      encrypted             = true
      kms_key_id            = "alias/ebs"
      volume_size           = 100
      volume_type           = "io2"
    }
  }

  iam_instance_profile {
    arn = "arn:aws:iam::123456789012:instance-profile/cp"
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-prod-k8s-example-org.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 2
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                       = "control-plane-a.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "control-plane-a"
      "ballast.dev/node-spec-hash"                 = "22808e15239b1f9d30c01fe62117f834f30c7771222e244701ccb4271190b76f"
      "ballast.dev/role"                           = "control-plane"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "platform"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                       = "control-plane-a.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "control-plane-a"
      "ballast.dev/node-spec-hash"                 = "22808e15239b1f9d30c01fe62117f834f30c7771222e244701ccb4271190b76f"
      "ballast.dev/role"                           = "control-plane"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "platform"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                       = "control-plane-a.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "control-plane-a"
      "ballast.dev/role"                           = "control-plane"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "platform"
    }
  }
}

resource "aws_launch_template" "gpu-prod-k8s-example-org" {
  image_id      = data.aws_ami.ballast-k8s-1-32-debian-12.id
  instance_type = "g5.xlarge"
  name          = "gpu.prod.k8s.example.org"
  tags = {
    "Name"                                       = "gpu.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                 = "gpu"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogcHJvZC5rOHMuZXhhbXBsZS5vcmcKaW5zdGFuY2VHcm91cDogZ3B1CnJvbGU6IE5vZGUKc3RhdGVTdG9yZTogczM6Ly9zdGF0ZS9jbHVzdGVycwpub2RlU3BlYzogcHJvZC5rOHMuZXhhbXBsZS5vcmcvbm9kZXMvZ3B1L3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogOGQ3YThkNWJiMzRlMGNhZTlkZWQyOWRlYzY3ZmFjNjkyZjc0YzE3NWFiNzViN2RhYmFiY2Q3ZDJlMTA5ZDYyMgo="

  block_device_mappings {
    device_name = data.aws_ami.ballast-k8s-1-32-debian-12.root_device_name

    ebs {
      delete_on_termination = true
      encrypted             = true
      volume_size           = 128
      volume_type           = "gp3"
    }
  }

  iam_instance_profile {
    arn = aws_iam_instance_profile.nodes-prod-k8s-example-org.arn
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-prod-k8s-example-org.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                       = "gpu.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "gpu"
      "ballast.dev/node-spec-hash"                 = "8d7a8d5bb34e0cae9ded29dec67fac692f74c175ab75b7dababcd7d2e109d622"
      "ballast.dev/role"                           = "node"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "ml"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                       = "gpu.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "gpu"
      "ballast.dev/node-spec-hash"                 = "8d7a8d5bb34e0cae9ded29dec67fac692f74c175ab75b7dababcd7d2e109d622"
      "ballast.dev/role"                           = "node"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "ml"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                       = "gpu.prod.k8s.example.org"
      "ballast.dev/cluster"                        = "prod.k8s.example.org"
      "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                 = "gpu"
      "ballast.dev/role"                           = "node"
      "cost-center"                                = "1234"
      "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
      "team"                                       = "ml"
    }
  }
}

resource "aws_lb" "api-prod-k8s-example-or-758ffc84" {
  internal           = true
  load_balancer_type = "network"
  name               = "api-prod-k8s-example-or-758ffc84"
  subnets            = ["subnet-0123456789abcdef0"]
  tags = {
    "Name"                                       = "api-prod-k8s-example-or-758ffc84"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
}

resource "aws_lb_listener" "api-prod-k8s-example-or-758ffc84-443" {
  load_balancer_arn = aws_lb.api-prod-k8s-example-or-758ffc84.arn
  port              = 443
  protocol          = "TCP"

  default_action {
    target_group_arn = aws_lb_target_group.tcp-prod-k8s-example-or-758ffc84.arn
    type             = "forward"
  }
}

resource "aws_lb_target_group" "tcp-prod-k8s-example-or-758ffc84" {
  name     = "tcp-prod-k8s-example-or-758ffc84"
  port     = 443
  protocol = "TCP"
  tags = {
    "Name"                                       = "api-prod-k8s-example-or-758ffc84"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  target_type = "instance"
  vpc_id      = "vpc-0123456789abcdef0"

  health_check {
    protocol = "TCP"
  }
}

resource "aws_security_group" "control-plane-prod-k8s-example-org" {
  description = "Control plane of the Kubernetes cluster prod.k8s.example.org"
  name        = "control-plane.prod.k8s.example.org"
  tags = {
    "Name"                                       = "control-plane.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  vpc_id = "vpc-0123456789abcdef0"
}

resource "aws_security_group" "nodes-prod-k8s-example-org" {
  description = "Nodes of the Kubernetes cluster prod.k8s.example.org"
  name        = "nodes.prod.k8s.example.org"
  tags = {
    "Name"                                       = "nodes.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "team"                                       = "platform"
  }
  vpc_id = "vpc-0123456789abcdef0"
}

resource "aws_security_group_rule" "control-plane-prod-k8s-example-org-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port           = 0
  type              = "egress"
}

resource "aws_security_group_rule" "from-10-0-0-0-8-ingress-tcp-22to22-control-plane-prod-k8s-example-org" {
  cidr_blocks       = ["10.0.0.0/8"]
  description       = "tcp 22-22 from 10.0.0.0/8"
  from_port         = 22
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port           = 22
  type              = "ingress"
}

resource "aws_security_group_rule" "from-10-0-0-0-8-ingress-tcp-22to22-nodes-prod-k8s-example-org" {
  cidr_blocks       = ["10.0.0.0/8"]
  description       = "tcp 22-22 from 10.0.0.0/8"
  from_port         = 22
  protocol          = "tcp"
  security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  to_port           = 22
  type              = "ingress"
}

resource "aws_security_group_rule" "from-10-0-0-0-8-ingress-tcp-443to443-control-plane-prod-k8s-example-org" {
  cidr_blocks       = ["10.0.0.0/8"]
  description       = "tcp 443-443 from 10.0.0.0/8"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-10-10-0-0-16-ingress-tcp-443to443-control-plane-prod-k8s-example-org" {
  cidr_blocks       = ["10.10.0.0/16"]
  description       = "tcp 443-443 from 10.10.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-192-168-0-0-16-ingress-tcp-443to443-control-plane-prod-k8s-example-org" {
  cidr_blocks       = ["192.168.0.0/16"]
  description       = "tcp 443-443 from 192.168.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-control-plane-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-nodes-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.control-plane-prod-k8s-example-org.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-prod-k8s-example-org.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-4-0to0-control-plane-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  description              = "4 0-0 from nodes"
  from_port                = 0
  protocol                 = "4"
  security_group_id        = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-all-0to0-nodes-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  description              = "all 0-0 from nodes"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-prod-k8s-example-org.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-1to2378-control-plane-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  description              = "tcp 1-2378 from nodes"
  from_port                = 1
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port                  = 2378
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-2381to65535-control-plane-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  description              = "tcp 2381-65535 from nodes"
  from_port                = 2381
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-udp-1to65535-control-plane-prod-k8s-example-org" {
  source_security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  description              = "udp 1-65535 from nodes"
  from_port                = 1
  protocol                 = "udp"
  security_group_id        = aws_security_group.control-plane-prod-k8s-example-org.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "nodes-prod-k8s-example-org-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.nodes-prod-k8s-example-org.id
  to_port           = 0
  type              = "egress"
}

resource "aws_subnet" "utility-a-prod-k8s-example-org" {
  availability_zone = "eu-central-1a"
  cidr_block        = "10.10.200.0/24"
  tags = {
    "Name"                                       = "utility-a.prod.k8s.example.org"
    "ballast.dev/cluster"                        = "prod.k8s.example.org"
    "ballast.dev/cluster-id"                     = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "cost-center"                                = "1234"
    "kubernetes.io/cluster/prod.k8s.example.org" = "owned"
    "kubernetes.io/role/elb"                     = "1"
    "team"                                       = "platform"
  }
  vpc_id = "vpc-0123456789abcdef0"
}

terraform {
  required_version = ">= 1.0.0"

  required_providers {
    aws = {
      "source"  = "hashicorp/aws"
      "version" = ">= 5.0.0"
    }
  }
}
