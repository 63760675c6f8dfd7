output "api_lb_dns_name" {
  value = aws_lb.api-spot-example-com-6ef9a0fa.dns_name
}

output "cluster_name" {
  value = "spot.example.com"
}

output "master_security_group_ids" {
  value = [aws_security_group.control-plane-spot-example-com.id]
}

output "masters_role_arn" {
  value = aws_iam_role.control-plane-spot-example-com.arn
}

output "masters_role_name" {
  value = aws_iam_role.control-plane-spot-example-com.name
}

output "node_security_group_ids" {
  value = [aws_security_group.nodes-spot-example-com.id]
}

output "node_subnet_ids" {
  value = [aws_subnet.a-spot-example-com.id, aws_subnet.b-spot-example-com.id]
}

output "nodes_role_arn" {
  value = aws_iam_role.nodes-spot-example-com.arn
}

output "nodes_role_name" {
  value = aws_iam_role.nodes-spot-example-com.name
}

output "region" {
  value = "us-west-2"
}

output "route_table_public_id" {
  value = aws_route_table.public-spot-example-com.id
}

output "subnet_a_id" {
  value = aws_subnet.a-spot-example-com.id
}

output "subnet_b_id" {
  value = aws_subnet.b-spot-example-com.id
}

output "subnet_ids" {
  value = [aws_subnet.a-spot-example-com.id, aws_subnet.b-spot-example-com.id]
}

output "vpc_cidr_block" {
  value = aws_vpc.spot-example-com.cidr_block
}

output "vpc_id" {
  value = aws_vpc.spot-example-com.id
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

resource "aws_autoscaling_group" "control-plane-a-spot-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-a.spot.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-spot-example-com-6ef9a0fa.arn, "arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/admin/0123456789abcdef"]
  vpc_zone_identifier = [aws_subnet.a-spot-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-a-spot-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-a.spot.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "spot.example.com"
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
    key                 = "kubernetes.io/cluster/spot.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "nodes-spot-example-com" {
  desired_capacity      = 2
  max_size              = 6
  min_size              = 2
  name                  = "nodes.spot.example.com"
  target_group_arns     = ["arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/web/0123456789abcdef"]
  load_balancers        = ["web-elb"]
  max_instance_lifetime = 604800
  protect_from_scale_in = true
  vpc_zone_identifier   = [aws_subnet.a-spot-example-com.id, aws_subnet.b-spot-example-com.id]

  mixed_instances_policy {
    instances_distribution {
      on_demand_base_capacity                  = 1
      on_demand_percentage_above_base_capacity = 25
      spot_allocation_strategy                 = "lowest-price"
      spot_instance_pools                      = 3
      spot_max_price                           = "0.08"
    }

    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.nodes-spot-example-com.id
        version            = "$Default"
      }

      override {
        instance_type = "m5.large"
      }

      override {
        instance_type = "m5a.large"
      }

      override {
        instance_type = "m6i.large"
      }
    }
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "nodes.spot.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "spot.example.com"
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
    key                 = "kubernetes.io/cluster/spot.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "spot-spot-example-com" {
  desired_capacity    = 2
  max_size            = 2
  min_size            = 2
  name                = "spot.spot.example.com"
  vpc_zone_identifier = [aws_subnet.b-spot-example-com.id]

  launch_template {
    id      = aws_launch_template.spot-spot-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "spot.spot.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "spot.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "spot"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "node"
  }

  tag {
    key                 = "kubernetes.io/cluster/spot.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_ebs_volume" "control-plane-a-etcd-spot-example-com" {
  availability_zone = "us-west-2a"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                   = "control-plane-a.etcd.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                = "control-plane-a"
    "ballast.dev/instance-group"             = "control-plane-a"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_iam_instance_profile" "control-plane-spot-example-com" {
  name = "control-plane.spot.example.com"
  role = aws_iam_role.control-plane-spot-example-com.name
}

resource "aws_iam_instance_profile" "nodes-spot-example-com" {
  name = "nodes.spot.example.com"
  role = aws_iam_role.nodes-spot-example-com.name
}

resource "aws_iam_role" "control-plane-spot-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "control-plane.spot.example.com"
  tags = {
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
}

resource "aws_iam_role" "nodes-spot-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "nodes.spot.example.com"
  tags = {
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
}

resource "aws_iam_role_policy" "control-plane-spot-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/*\"],\"Sid\":\"ReadClusterState\"},{\"Action\":[\"s3:PutObject\",\"s3:DeleteObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/etcd/*\",\"arn:aws:s3:::state/clusters/spot.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"WriteEtcd\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/spot.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"s3:ListBucket\"],\"Condition\":{\"StringLike\":{\"s3:prefix\":[\"clusters/spot.example.com/*\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state\"],\"Sid\":\"ListClusterState\"},{\"Action\":[\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"autoscaling:DescribeAutoScalingGroups\",\"autoscaling:DescribeAutoScalingInstances\",\"elasticloadbalancing:DescribeLoadBalancers\",\"elasticloadbalancing:DescribeTargetGroups\",\"elasticloadbalancing:DescribeTargetHealth\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DiscoverPeers\"},{\"Action\":[\"iam:GetInstanceProfile\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"VerifyNodeProfiles\"},{\"Action\":[\"ec2:DescribeVolumes\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"FindEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"AttachOwnEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/ballast.dev/role\":\"control-plane\",\"ec2:ResourceTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"AttachToOwnControlPlane\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeRegions\",\"ec2:DescribeRouteTables\",\"ec2:DescribeSecurityGroups\",\"ec2:DescribeSubnets\",\"ec2:DescribeVolumes\",\"ec2:DescribeVpcs\",\"elasticloadbalancing:Describe*\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerRead\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:vpc/*\"],\"Sid\":\"CloudControllerCreateSecurityGroupInVpc\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerCreateOwnedSecurityGroups\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateSecurityGroup\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerTagNewSecurityGroups\"},{\"Action\":[\"elasticloadbalancing:CreateLoadBalancer\",\"elasticloadbalancing:CreateTargetGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerCreateOwnedLoadBalancers\"},{\"Action\":[\"elasticloadbalancing:AddTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\",\"elasticloadbalancing:CreateAction\":[\"CreateLoadBalancer\",\"CreateTargetGroup\"]}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerTagNewLoadBalancers\"},{\"Action\":[\"ec2:AuthorizeSecurityGroupIngress\",\"ec2:DeleteSecurityGroup\",\"ec2:RevokeSecurityGroupIngress\",\"elasticloadbalancing:AddTags\",\"elasticloadbalancing:ApplySecurityGroupsToLoadBalancer\",\"elasticloadbalancing:AttachLoadBalancerToSubnets\",\"elasticloadbalancing:ConfigureHealthCheck\",\"elasticloadbalancing:CreateListener\",\"elasticloadbalancing:CreateLoadBalancerListeners\",\"elasticloadbalancing:CreateLoadBalancerPolicy\",\"elasticloadbalancing:DeleteListener\",\"elasticloadbalancing:DeleteLoadBalancer\",\"elasticloadbalancing:DeleteLoadBalancerListeners\",\"elasticloadbalancing:DeleteTargetGroup\",\"elasticloadbalancing:DeregisterInstancesFromLoadBalancer\",\"elasticloadbalancing:DeregisterTargets\",\"elasticloadbalancing:DetachLoadBalancerFromSubnets\",\"elasticloadbalancing:ModifyListener\",\"elasticloadbalancing:ModifyLoadBalancerAttributes\",\"elasticloadbalancing:ModifyTargetGroup\",\"elasticloadbalancing:RegisterInstancesWithLoadBalancer\",\"elasticloadbalancing:RegisterTargets\",\"elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer\",\"elasticloadbalancing:SetLoadBalancerPoliciesOfListener\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerManageOwned\"},{\"Action\":[\"iam:CreateServiceLinkedRole\"],\"Condition\":{\"StringEquals\":{\"iam:AWSServiceName\":\"elasticloadbalancing.amazonaws.com\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*\"],\"Sid\":\"CloudControllerElbServiceLinkedRole\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"ec2:DescribeVolumes\",\"ec2:DescribeVolumesModifications\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"EbsCsiRead\"},{\"Action\":[\"ec2:CreateVolume\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiCreateOwnedVolumes\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/spot.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateVolume\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiTagNewVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\",\"ec2:ModifyVolume\",\"ec2:DeleteVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:ResourceTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiManageOwnedVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/spot.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"EbsCsiAttachToOwnInstances\"},{\"Action\":[\"s3:PutObject\"],\"Condition\":{\"Null\":{\"s3:if-none-match\":\"false\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/audit/$${aws:userid}/*\"],\"Sid\":\"ShipOwnAuditLog\"},{\"Action\":[\"s3:GetObject\",\"s3:GetObjectVersion\"],\"Effect\":\"Deny\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/audit/*\"],\"Sid\":\"NeverReadAuditLog\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.control-plane-spot-example-com.name
}

resource "aws_iam_role_policy" "nodes-spot-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/nodes/nodes/*\",\"arn:aws:s3:::state/clusters/spot.example.com/nodes/spot/*\",\"arn:aws:s3:::state/clusters/spot.example.com/pki/kubernetes-ca/cert.pem\",\"arn:aws:s3:::state/clusters/spot.example.com/pki/kubernetes-ca/*/cert.pem\",\"arn:aws:s3:::state/clusters/spot.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"ReadNodeSpecs\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/spot.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/spot.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"ec2:DescribeInstances\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DescribeSelf\"},{\"Action\":[\"ecr:GetAuthorizationToken\",\"ecr:BatchCheckLayerAvailability\",\"ecr:GetDownloadUrlForLayer\",\"ecr:BatchGetImage\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"PullFromContainerRegistry\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.nodes-spot-example-com.name
}

resource "aws_internet_gateway" "spot-example-com" {
  tags = {
    "Name"                                   = "spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_launch_template" "control-plane-a-spot-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-a.spot.example.com"
  tags = {
    "Name"                                   = "control-plane-a.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "control-plane-a"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogc3BvdC5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLWEKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHNwb3QuZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS1hL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogY2Y4Y2Q3M2FkYzVlNzZhNTU5MjUwNzQ5MjFjMjBkY2UyNDQ1NTkwZTU1MWYzNDY0MmRlMmRiZjQyNjAxM2E2ZQo="

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
    arn = aws_iam_instance_profile.control-plane-spot-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-spot-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "control-plane-a.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-a"
      "ballast.dev/node-spec-hash"             = "cf8cd73adc5e76a55925074921c20dce2445590e551f34642de2dbf426013a6e"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "control-plane-a.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-a"
      "ballast.dev/node-spec-hash"             = "cf8cd73adc5e76a55925074921c20dce2445590e551f34642de2dbf426013a6e"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "control-plane-a.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-a"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "nodes-spot-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "m5.large"
  name          = "nodes.spot.example.com"
  tags = {
    "Name"                                   = "nodes.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "nodes"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogc3BvdC5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBub2Rlcwpyb2xlOiBOb2RlCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHNwb3QuZXhhbXBsZS5jb20vbm9kZXMvbm9kZXMvc3BlYy55YW1sCm5vZGVTcGVjU2hhMjU2OiAyMzZkNmU2ZWIwMTkwY2NhZTcyODgxMTA2ZmE3ZTEyYTZlZDAyZTZlN2E3Yjk1MjdhMDQwMTIxZThhMzM4NDZjCg=="

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
    arn = aws_iam_instance_profile.nodes-spot-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-spot-example-com.id, "sg-0123456789abcdef0"]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "nodes.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/node-spec-hash"             = "236d6e6eb0190ccae72881106fa7e12a6ed02e6e7a7b9527a040121e8a33846c"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "nodes.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/node-spec-hash"             = "236d6e6eb0190ccae72881106fa7e12a6ed02e6e7a7b9527a040121e8a33846c"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "nodes.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "spot-spot-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "spot.spot.example.com"
  tags = {
    "Name"                                   = "spot.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "spot"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogc3BvdC5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBzcG90CnJvbGU6IE5vZGUKc3RhdGVTdG9yZTogczM6Ly9zdGF0ZS9jbHVzdGVycwpub2RlU3BlYzogc3BvdC5leGFtcGxlLmNvbS9ub2Rlcy9zcG90L3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogMjMxMjg1ZDJkYjI3NzBiOWE5YjFhMTg2OTQ3NGVjZjUwOGUyZjAzYzYwYmE3MWNlZWYwZjg3MjM0ODNlOGJhMQo="

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
    arn = aws_iam_instance_profile.nodes-spot-example-com.arn
  }

  instance_market_options {
    market_type = "spot"

    spot_options {
      max_price = "0.05"
    }
  }

  network_interfaces {
    associate_public_ip_address = false
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-spot-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "spot.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "spot"
      "ballast.dev/node-spec-hash"             = "231285d2db2770b9a9b1a1869474ecf508e2f03c60ba71ceef0f8723483e8ba1"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "spot.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "spot"
      "ballast.dev/node-spec-hash"             = "231285d2db2770b9a9b1a1869474ecf508e2f03c60ba71ceef0f8723483e8ba1"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "spot.spot.example.com"
      "ballast.dev/cluster"                    = "spot.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "spot"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/spot.example.com" = "owned"
    }
  }
}

resource "aws_lb" "api-spot-example-com-6ef9a0fa" {
  internal           = false
  load_balancer_type = "network"
  name               = "api-spot-example-com-6ef9a0fa"
  subnets            = [aws_subnet.a-spot-example-com.id, aws_subnet.b-spot-example-com.id]
  tags = {
    "Name"                                   = "api-spot-example-com-6ef9a0fa"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
}

resource "aws_lb_listener" "api-spot-example-com-6ef9a0fa-443" {
  load_balancer_arn = aws_lb.api-spot-example-com-6ef9a0fa.arn
  port              = 443
  protocol          = "TCP"

  default_action {
    target_group_arn = aws_lb_target_group.tcp-spot-example-com-6ef9a0fa.arn
    type             = "forward"
  }
}

resource "aws_lb_target_group" "tcp-spot-example-com-6ef9a0fa" {
  name     = "tcp-spot-example-com-6ef9a0fa"
  port     = 443
  protocol = "TCP"
  tags = {
    "Name"                                   = "api-spot-example-com-6ef9a0fa"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  target_type = "instance"
  vpc_id      = aws_vpc.spot-example-com.id

  health_check {
    protocol = "TCP"
  }
}

resource "aws_route" "route-public-spot-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.spot-example-com.id
  route_table_id         = aws_route_table.public-spot-example-com.id
}

resource "aws_route_table" "public-spot-example-com" {
  tags = {
    "Name"                                   = "public.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_route_table_association" "a-spot-example-com" {
  route_table_id = aws_route_table.public-spot-example-com.id
  subnet_id      = aws_subnet.a-spot-example-com.id
}

resource "aws_route_table_association" "b-spot-example-com" {
  route_table_id = aws_route_table.public-spot-example-com.id
  subnet_id      = aws_subnet.b-spot-example-com.id
}

resource "aws_security_group" "control-plane-spot-example-com" {
  description = "Control plane of the Kubernetes cluster spot.example.com"
  name        = "control-plane.spot.example.com"
  tags = {
    "Name"                                   = "control-plane.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_security_group" "nodes-spot-example-com" {
  description = "Nodes of the Kubernetes cluster spot.example.com"
  name        = "nodes.spot.example.com"
  tags = {
    "Name"                                   = "nodes.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_security_group_rule" "control-plane-spot-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.control-plane-spot-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_security_group_rule" "from-0-0-0-0-0-ingress-tcp-443to443-control-plane-spot-example-com" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "tcp 443-443 from 0.0.0.0/0"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-spot-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-172-20-0-0-16-ingress-tcp-443to443-control-plane-spot-example-com" {
  cidr_blocks       = ["172.20.0.0/16"]
  description       = "tcp 443-443 from 172.20.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-spot-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-control-plane-spot-example-com" {
  source_security_group_id = aws_security_group.control-plane-spot-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.control-plane-spot-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-nodes-spot-example-com" {
  source_security_group_id = aws_security_group.control-plane-spot-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-spot-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-all-0to0-nodes-spot-example-com" {
  source_security_group_id = aws_security_group.nodes-spot-example-com.id
  description              = "all 0-0 from nodes"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-spot-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-1to2378-control-plane-spot-example-com" {
  source_security_group_id = aws_security_group.nodes-spot-example-com.id
  description              = "tcp 1-2378 from nodes"
  from_port                = 1
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-spot-example-com.id
  to_port                  = 2378
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-2381to65535-control-plane-spot-example-com" {
  source_security_group_id = aws_security_group.nodes-spot-example-com.id
  description              = "tcp 2381-65535 from nodes"
  from_port                = 2381
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-spot-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-udp-1to65535-control-plane-spot-example-com" {
  source_security_group_id = aws_security_group.nodes-spot-example-com.id
  description              = "udp 1-65535 from nodes"
  from_port                = 1
  protocol                 = "udp"
  security_group_id        = aws_security_group.control-plane-spot-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "nodes-spot-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.nodes-spot-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_subnet" "a-spot-example-com" {
  availability_zone = "us-west-2a"
  cidr_block        = "10.0.0.0/20"
  tags = {
    "Name"                                   = "a.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
    "kubernetes.io/role/elb"                 = "1"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_subnet" "b-spot-example-com" {
  availability_zone = "us-west-2b"
  cidr_block        = "10.0.16.0/20"
  tags = {
    "Name"                                   = "b.spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
    "kubernetes.io/role/elb"                 = "1"
  }
  vpc_id = aws_vpc.spot-example-com.id
}

resource "aws_vpc" "spot-example-com" {
  cidr_block           = "172.20.0.0/16"
  enable_dns_hostnames = true
  enable_dns_support   = true
  tags = {
    "Name"                                   = "spot.example.com"
    "ballast.dev/cluster"                    = "spot.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/spot.example.com" = "owned"
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
