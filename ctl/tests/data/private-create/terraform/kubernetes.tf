output "api_lb_dns_name" {
  value = aws_lb.api-private-example-com-326d09eb.dns_name
}

output "cluster_name" {
  value = "private.example.com"
}

output "master_security_group_ids" {
  value = [aws_security_group.control-plane-private-example-com.id]
}

output "masters_role_arn" {
  value = aws_iam_role.control-plane-private-example-com.arn
}

output "masters_role_name" {
  value = aws_iam_role.control-plane-private-example-com.name
}

output "node_security_group_ids" {
  value = [aws_security_group.nodes-private-example-com.id]
}

output "node_subnet_ids" {
  value = [aws_subnet.private-a-private-example-com.id, aws_subnet.private-b-private-example-com.id]
}

output "nodes_role_arn" {
  value = aws_iam_role.nodes-private-example-com.arn
}

output "nodes_role_name" {
  value = aws_iam_role.nodes-private-example-com.name
}

output "region" {
  value = "us-west-2"
}

output "route_table_public_id" {
  value = aws_route_table.public-private-example-com.id
}

output "subnet_ids" {
  value = [aws_subnet.private-a-private-example-com.id, aws_subnet.private-b-private-example-com.id, aws_subnet.utility-a-private-example-com.id, aws_subnet.utility-b-private-example-com.id]
}

output "subnet_private-a_id" {
  value = aws_subnet.private-a-private-example-com.id
}

output "subnet_private-b_id" {
  value = aws_subnet.private-b-private-example-com.id
}

output "subnet_utility-a_id" {
  value = aws_subnet.utility-a-private-example-com.id
}

output "subnet_utility-b_id" {
  value = aws_subnet.utility-b-private-example-com.id
}

output "vpc_cidr_block" {
  value = aws_vpc.private-example-com.cidr_block
}

output "vpc_id" {
  value = aws_vpc.private-example-com.id
}

provider "aws" {
  region = "us-west-2"
}

data "aws_ami" "ballast-k8s-1-33-debian-12" {
  most_recent = true

  filter {
    name   = "name"
    values = ["ballast-k8s-1.33-debian-12"]
  }
}

resource "aws_autoscaling_group" "control-plane-a-private-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-a.private.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-private-example-com-326d09eb.arn]
  vpc_zone_identifier = [aws_subnet.private-a-private-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-a-private-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-a.private.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "private.example.com"
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
    key                 = "kubernetes.io/cluster/private.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "nodes-private-example-com" {
  desired_capacity    = 2
  max_size            = 4
  min_size            = 2
  name                = "nodes.private.example.com"
  vpc_zone_identifier = [aws_subnet.private-a-private-example-com.id, aws_subnet.private-b-private-example-com.id]

  launch_template {
    id      = aws_launch_template.nodes-private-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "nodes.private.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "private.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "nodes"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "node"
  }

  tag {
    key                 = "kubernetes.io/cluster/private.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_ebs_volume" "control-plane-a-etcd-private-example-com" {
  availability_zone = "us-west-2a"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                      = "control-plane-a.etcd.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                   = "control-plane-a"
    "ballast.dev/instance-group"                = "control-plane-a"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_eip" "us-west-2a-private-example-com" {
  domain = "vpc"
  tags = {
    "Name"                                      = "us-west-2a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_eip" "us-west-2b-private-example-com" {
  domain = "vpc"
  tags = {
    "Name"                                      = "us-west-2b.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_iam_instance_profile" "control-plane-private-example-com" {
  name = "control-plane.private.example.com"
  role = aws_iam_role.control-plane-private-example-com.name
}

resource "aws_iam_instance_profile" "nodes-private-example-com" {
  name = "nodes.private.example.com"
  role = aws_iam_role.nodes-private-example-com.name
}

resource "aws_iam_role" "control-plane-private-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "control-plane.private.example.com"
  tags = {
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_iam_role" "nodes-private-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "nodes.private.example.com"
  tags = {
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_iam_role_policy" "control-plane-private-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/*\"],\"Sid\":\"ReadClusterState\"},{\"Action\":[\"s3:PutObject\",\"s3:DeleteObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/etcd/*\",\"arn:aws:s3:::state/clusters/private.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"WriteEtcd\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/private.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"s3:ListBucket\"],\"Condition\":{\"StringLike\":{\"s3:prefix\":[\"clusters/private.example.com/*\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state\"],\"Sid\":\"ListClusterState\"},{\"Action\":[\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"autoscaling:DescribeAutoScalingGroups\",\"autoscaling:DescribeAutoScalingInstances\",\"elasticloadbalancing:DescribeLoadBalancers\",\"elasticloadbalancing:DescribeTargetGroups\",\"elasticloadbalancing:DescribeTargetHealth\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DiscoverPeers\"},{\"Action\":[\"iam:GetInstanceProfile\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"VerifyNodeProfiles\"},{\"Action\":[\"ec2:DescribeVolumes\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"FindEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"AttachOwnEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/ballast.dev/role\":\"control-plane\",\"ec2:ResourceTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"AttachToOwnControlPlane\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeRegions\",\"ec2:DescribeRouteTables\",\"ec2:DescribeSecurityGroups\",\"ec2:DescribeSubnets\",\"ec2:DescribeVolumes\",\"ec2:DescribeVpcs\",\"elasticloadbalancing:Describe*\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerRead\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:vpc/*\"],\"Sid\":\"CloudControllerCreateSecurityGroupInVpc\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerCreateOwnedSecurityGroups\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateSecurityGroup\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerTagNewSecurityGroups\"},{\"Action\":[\"elasticloadbalancing:CreateLoadBalancer\",\"elasticloadbalancing:CreateTargetGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerCreateOwnedLoadBalancers\"},{\"Action\":[\"elasticloadbalancing:AddTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\",\"elasticloadbalancing:CreateAction\":[\"CreateLoadBalancer\",\"CreateTargetGroup\"]}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerTagNewLoadBalancers\"},{\"Action\":[\"ec2:AuthorizeSecurityGroupIngress\",\"ec2:DeleteSecurityGroup\",\"ec2:RevokeSecurityGroupIngress\",\"elasticloadbalancing:AddTags\",\"elasticloadbalancing:ApplySecurityGroupsToLoadBalancer\",\"elasticloadbalancing:AttachLoadBalancerToSubnets\",\"elasticloadbalancing:ConfigureHealthCheck\",\"elasticloadbalancing:CreateListener\",\"elasticloadbalancing:CreateLoadBalancerListeners\",\"elasticloadbalancing:CreateLoadBalancerPolicy\",\"elasticloadbalancing:DeleteListener\",\"elasticloadbalancing:DeleteLoadBalancer\",\"elasticloadbalancing:DeleteLoadBalancerListeners\",\"elasticloadbalancing:DeleteTargetGroup\",\"elasticloadbalancing:DeregisterInstancesFromLoadBalancer\",\"elasticloadbalancing:DeregisterTargets\",\"elasticloadbalancing:DetachLoadBalancerFromSubnets\",\"elasticloadbalancing:ModifyListener\",\"elasticloadbalancing:ModifyLoadBalancerAttributes\",\"elasticloadbalancing:ModifyTargetGroup\",\"elasticloadbalancing:RegisterInstancesWithLoadBalancer\",\"elasticloadbalancing:RegisterTargets\",\"elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer\",\"elasticloadbalancing:SetLoadBalancerPoliciesOfListener\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerManageOwned\"},{\"Action\":[\"iam:CreateServiceLinkedRole\"],\"Condition\":{\"StringEquals\":{\"iam:AWSServiceName\":\"elasticloadbalancing.amazonaws.com\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*\"],\"Sid\":\"CloudControllerElbServiceLinkedRole\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"ec2:DescribeVolumes\",\"ec2:DescribeVolumesModifications\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"EbsCsiRead\"},{\"Action\":[\"ec2:CreateVolume\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiCreateOwnedVolumes\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/private.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateVolume\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiTagNewVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\",\"ec2:ModifyVolume\",\"ec2:DeleteVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:ResourceTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiManageOwnedVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/private.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"EbsCsiAttachToOwnInstances\"},{\"Action\":[\"s3:PutObject\"],\"Condition\":{\"Null\":{\"s3:if-none-match\":\"false\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/audit/$${aws:userid}/*\"],\"Sid\":\"ShipOwnAuditLog\"},{\"Action\":[\"s3:GetObject\",\"s3:GetObjectVersion\"],\"Effect\":\"Deny\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/audit/*\"],\"Sid\":\"NeverReadAuditLog\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.control-plane-private-example-com.name
}

resource "aws_iam_role_policy" "nodes-private-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/nodes/nodes/*\",\"arn:aws:s3:::state/clusters/private.example.com/pki/kubernetes-ca/cert.pem\",\"arn:aws:s3:::state/clusters/private.example.com/pki/kubernetes-ca/*/cert.pem\",\"arn:aws:s3:::state/clusters/private.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"ReadNodeSpecs\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/private.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/private.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"ec2:DescribeInstances\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DescribeSelf\"},{\"Action\":[\"ecr:GetAuthorizationToken\",\"ecr:BatchCheckLayerAvailability\",\"ecr:GetDownloadUrlForLayer\",\"ecr:BatchGetImage\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"PullFromContainerRegistry\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.nodes-private-example-com.name
}

resource "aws_internet_gateway" "private-example-com" {
  tags = {
    "Name"                                      = "private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_launch_template" "control-plane-a-private-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-a.private.example.com"
  tags = {
    "Name"                                      = "control-plane-a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                = "control-plane-a"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogcHJpdmF0ZS5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLWEKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHByaXZhdGUuZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS1hL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogMjc5ZjRlODY4Nzk0OTVlNTJkZDZlNDAxMDNmZDU5M2JkYmY2ZjgzNDZlMzM2N2IxZjQ4ODM5YzA0MmM5NDQzMgo="

  block_device_mappings {
    device_name = data.aws_ami.ballast-k8s-1-33-debian-12.root_device_name

    ebs {
      delete_on_termination = true
      encrypted             = true
      volume_size           = 64
      volume_type           = "gp3"
    }
  }

  iam_instance_profile {
    arn = aws_iam_instance_profile.control-plane-private-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-private-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                      = "control-plane-a.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/node-spec-hash"                = "279f4e86879495e52dd6e40103fd593bdbf6f8346e3367b1f48839c042c94432"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                      = "control-plane-a.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/node-spec-hash"                = "279f4e86879495e52dd6e40103fd593bdbf6f8346e3367b1f48839c042c94432"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                      = "control-plane-a.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "nodes-private-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "nodes.private.example.com"
  tags = {
    "Name"                                      = "nodes.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                = "nodes"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogcHJpdmF0ZS5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBub2Rlcwpyb2xlOiBOb2RlCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHByaXZhdGUuZXhhbXBsZS5jb20vbm9kZXMvbm9kZXMvc3BlYy55YW1sCm5vZGVTcGVjU2hhMjU2OiAwNWY3ZDVlNGJhMzVhNzlmZGU0NGUzOTEwZDY2OTEyMjYyOGM0MTE1NDRjMzYyNGE1YzU0ZWJhYTlhYTAxZmRmCg=="

  block_device_mappings {
    device_name = data.aws_ami.ballast-k8s-1-33-debian-12.root_device_name

    ebs {
      delete_on_termination = true
      encrypted             = true
      volume_size           = 128
      volume_type           = "gp3"
    }
  }

  iam_instance_profile {
    arn = aws_iam_instance_profile.nodes-private-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-private-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                      = "nodes.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/node-spec-hash"                = "05f7d5e4ba35a79fde44e3910d669122628c411544c3624a5c54ebaa9aa01fdf"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                      = "nodes.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/node-spec-hash"                = "05f7d5e4ba35a79fde44e3910d669122628c411544c3624a5c54ebaa9aa01fdf"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                      = "nodes.private.example.com"
      "ballast.dev/cluster"                       = "private.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/private.example.com" = "owned"
    }
  }
}

resource "aws_lb" "api-private-example-com-326d09eb" {
  internal           = false
  load_balancer_type = "network"
  name               = "api-private-example-com-326d09eb"
  subnets            = [aws_subnet.utility-a-private-example-com.id, aws_subnet.utility-b-private-example-com.id]
  tags = {
    "Name"                                      = "api-private-example-com-326d09eb"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_lb_listener" "api-private-example-com-326d09eb-443" {
  load_balancer_arn = aws_lb.api-private-example-com-326d09eb.arn
  port              = 443
  protocol          = "TCP"

  default_action {
    target_group_arn = aws_lb_target_group.tcp-private-example-com-326d09eb.arn
    type             = "forward"
  }
}

resource "aws_lb_target_group" "tcp-private-example-com-326d09eb" {
  name     = "tcp-private-example-com-326d09eb"
  port     = 443
  protocol = "TCP"
  tags = {
    "Name"                                      = "api-private-example-com-326d09eb"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  target_type = "instance"
  vpc_id      = aws_vpc.private-example-com.id

  health_check {
    protocol = "TCP"
  }
}

resource "aws_nat_gateway" "us-west-2a-private-example-com" {
  allocation_id = aws_eip.us-west-2a-private-example-com.id
  subnet_id     = aws_subnet.utility-a-private-example-com.id
  tags = {
    "Name"                                      = "us-west-2a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_nat_gateway" "us-west-2b-private-example-com" {
  allocation_id = aws_eip.us-west-2b-private-example-com.id
  subnet_id     = aws_subnet.utility-b-private-example-com.id
  tags = {
    "Name"                                      = "us-west-2b.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
}

resource "aws_route" "route-private-us-west-2a-private-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.us-west-2a-private-example-com.id
  route_table_id         = aws_route_table.private-us-west-2a-private-example-com.id
}

resource "aws_route" "route-private-us-west-2b-private-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.us-west-2b-private-example-com.id
  route_table_id         = aws_route_table.private-us-west-2b-private-example-com.id
}

resource "aws_route" "route-public-private-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.private-example-com.id
  route_table_id         = aws_route_table.public-private-example-com.id
}

resource "aws_route_table" "private-us-west-2a-private-example-com" {
  tags = {
    "Name"                                      = "private-us-west-2a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_route_table" "private-us-west-2b-private-example-com" {
  tags = {
    "Name"                                      = "private-us-west-2b.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_route_table" "public-private-example-com" {
  tags = {
    "Name"                                      = "public.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_route_table_association" "private-a-private-example-com" {
  route_table_id = aws_route_table.private-us-west-2a-private-example-com.id
  subnet_id      = aws_subnet.private-a-private-example-com.id
}

resource "aws_route_table_association" "private-b-private-example-com" {
  route_table_id = aws_route_table.private-us-west-2b-private-example-com.id
  subnet_id      = aws_subnet.private-b-private-example-com.id
}

resource "aws_route_table_association" "utility-a-private-example-com" {
  route_table_id = aws_route_table.public-private-example-com.id
  subnet_id      = aws_subnet.utility-a-private-example-com.id
}

resource "aws_route_table_association" "utility-b-private-example-com" {
  route_table_id = aws_route_table.public-private-example-com.id
  subnet_id      = aws_subnet.utility-b-private-example-com.id
}

resource "aws_security_group" "control-plane-private-example-com" {
  description = "Control plane of the Kubernetes cluster private.example.com"
  name        = "control-plane.private.example.com"
  tags = {
    "Name"                                      = "control-plane.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_security_group" "nodes-private-example-com" {
  description = "Nodes of the Kubernetes cluster private.example.com"
  name        = "nodes.private.example.com"
  tags = {
    "Name"                                      = "nodes.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_security_group_rule" "control-plane-private-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.control-plane-private-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_security_group_rule" "from-0-0-0-0-0-ingress-tcp-443to443-control-plane-private-example-com" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "tcp 443-443 from 0.0.0.0/0"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-private-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-172-20-0-0-16-ingress-tcp-443to443-control-plane-private-example-com" {
  cidr_blocks       = ["172.20.0.0/16"]
  description       = "tcp 443-443 from 172.20.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-private-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-control-plane-private-example-com" {
  source_security_group_id = aws_security_group.control-plane-private-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.control-plane-private-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-nodes-private-example-com" {
  source_security_group_id = aws_security_group.control-plane-private-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-private-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-all-0to0-nodes-private-example-com" {
  source_security_group_id = aws_security_group.nodes-private-example-com.id
  description              = "all 0-0 from nodes"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-private-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-1to2378-control-plane-private-example-com" {
  source_security_group_id = aws_security_group.nodes-private-example-com.id
  description              = "tcp 1-2378 from nodes"
  from_port                = 1
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-private-example-com.id
  to_port                  = 2378
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-2381to65535-control-plane-private-example-com" {
  source_security_group_id = aws_security_group.nodes-private-example-com.id
  description              = "tcp 2381-65535 from nodes"
  from_port                = 2381
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-private-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-udp-1to65535-control-plane-private-example-com" {
  source_security_group_id = aws_security_group.nodes-private-example-com.id
  description              = "udp 1-65535 from nodes"
  from_port                = 1
  protocol                 = "udp"
  security_group_id        = aws_security_group.control-plane-private-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "nodes-private-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.nodes-private-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_subnet" "private-a-private-example-com" {
  availability_zone = "us-west-2a"
  cidr_block        = "172.20.0.0/19"
  tags = {
    "Name"                                      = "private-a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
    "kubernetes.io/role/internal-elb"           = "1"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_subnet" "private-b-private-example-com" {
  availability_zone = "us-west-2b"
  cidr_block        = "172.20.32.0/19"
  tags = {
    "Name"                                      = "private-b.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
    "kubernetes.io/role/internal-elb"           = "1"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_subnet" "utility-a-private-example-com" {
  availability_zone = "us-west-2a"
  cidr_block        = "172.20.64.0/19"
  tags = {
    "Name"                                      = "utility-a.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
    "kubernetes.io/role/elb"                    = "1"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_subnet" "utility-b-private-example-com" {
  availability_zone = "us-west-2b"
  cidr_block        = "172.20.96.0/19"
  tags = {
    "Name"                                      = "utility-b.private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
    "kubernetes.io/role/elb"                    = "1"
  }
  vpc_id = aws_vpc.private-example-com.id
}

resource "aws_vpc" "private-example-com" {
  cidr_block           = "172.20.0.0/16"
  enable_dns_hostnames = true
  enable_dns_support   = true
  tags = {
    "Name"                                      = "private.example.com"
    "ballast.dev/cluster"                       = "private.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/private.example.com" = "owned"
  }
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
