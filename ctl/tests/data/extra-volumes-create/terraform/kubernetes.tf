output "api_lb_dns_name" {
  value = aws_lb.api-volumes-example-com-b3d9a5b7.dns_name
}

output "cluster_name" {
  value = "volumes.example.com"
}

output "master_security_group_ids" {
  value = [aws_security_group.control-plane-volumes-example-com.id]
}

output "masters_role_arn" {
  value = aws_iam_role.control-plane-volumes-example-com.arn
}

output "masters_role_name" {
  value = aws_iam_role.control-plane-volumes-example-com.name
}

output "node_security_group_ids" {
  value = [aws_security_group.nodes-volumes-example-com.id]
}

output "node_subnet_ids" {
  value = [aws_subnet.a-volumes-example-com.id]
}

output "nodes_role_arn" {
  value = aws_iam_role.nodes-volumes-example-com.arn
}

output "nodes_role_name" {
  value = aws_iam_role.nodes-volumes-example-com.name
}

output "region" {
  value = "us-west-2"
}

output "route_table_public_id" {
  value = aws_route_table.public-volumes-example-com.id
}

output "subnet_a_id" {
  value = aws_subnet.a-volumes-example-com.id
}

output "subnet_ids" {
  value = [aws_subnet.a-volumes-example-com.id]
}

output "vpc_cidr_block" {
  value = aws_vpc.volumes-example-com.cidr_block
}

output "vpc_id" {
  value = aws_vpc.volumes-example-com.id
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

resource "aws_autoscaling_group" "control-plane-a-volumes-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-a.volumes.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-volumes-example-com-b3d9a5b7.arn]
  vpc_zone_identifier = [aws_subnet.a-volumes-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-a-volumes-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-a.volumes.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "volumes.example.com"
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
    key                 = "kubernetes.io/cluster/volumes.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "nodes-volumes-example-com" {
  desired_capacity    = 2
  max_size            = 2
  min_size            = 2
  name                = "nodes.volumes.example.com"
  vpc_zone_identifier = [aws_subnet.a-volumes-example-com.id]

  launch_template {
    id      = aws_launch_template.nodes-volumes-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "nodes.volumes.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "volumes.example.com"
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
    key                 = "kubernetes.io/cluster/volumes.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_ebs_volume" "control-plane-a-etcd-volumes-example-com" {
  availability_zone = "us-west-2a"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                      = "control-plane-a.etcd.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                   = "control-plane-a"
    "ballast.dev/instance-group"                = "control-plane-a"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_iam_instance_profile" "control-plane-volumes-example-com" {
  name = "control-plane.volumes.example.com"
  role = aws_iam_role.control-plane-volumes-example-com.name
}

resource "aws_iam_instance_profile" "nodes-volumes-example-com" {
  name = "nodes.volumes.example.com"
  role = aws_iam_role.nodes-volumes-example-com.name
}

resource "aws_iam_role" "control-plane-volumes-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "control-plane.volumes.example.com"
  tags = {
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
}

resource "aws_iam_role" "nodes-volumes-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "nodes.volumes.example.com"
  tags = {
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
}

resource "aws_iam_role_policy" "control-plane-volumes-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/*\"],\"Sid\":\"ReadClusterState\"},{\"Action\":[\"s3:PutObject\",\"s3:DeleteObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/etcd/*\",\"arn:aws:s3:::state/clusters/volumes.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"WriteEtcd\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/volumes.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"s3:ListBucket\"],\"Condition\":{\"StringLike\":{\"s3:prefix\":[\"clusters/volumes.example.com/*\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state\"],\"Sid\":\"ListClusterState\"},{\"Action\":[\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"autoscaling:DescribeAutoScalingGroups\",\"autoscaling:DescribeAutoScalingInstances\",\"elasticloadbalancing:DescribeLoadBalancers\",\"elasticloadbalancing:DescribeTargetGroups\",\"elasticloadbalancing:DescribeTargetHealth\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DiscoverPeers\"},{\"Action\":[\"iam:GetInstanceProfile\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"VerifyNodeProfiles\"},{\"Action\":[\"ec2:DescribeVolumes\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"FindEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"AttachOwnEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/ballast.dev/role\":\"control-plane\",\"ec2:ResourceTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"AttachToOwnControlPlane\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeRegions\",\"ec2:DescribeRouteTables\",\"ec2:DescribeSecurityGroups\",\"ec2:DescribeSubnets\",\"ec2:DescribeVolumes\",\"ec2:DescribeVpcs\",\"elasticloadbalancing:Describe*\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerRead\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:vpc/*\"],\"Sid\":\"CloudControllerCreateSecurityGroupInVpc\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerCreateOwnedSecurityGroups\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateSecurityGroup\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerTagNewSecurityGroups\"},{\"Action\":[\"elasticloadbalancing:CreateLoadBalancer\",\"elasticloadbalancing:CreateTargetGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerCreateOwnedLoadBalancers\"},{\"Action\":[\"elasticloadbalancing:AddTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\",\"elasticloadbalancing:CreateAction\":[\"CreateLoadBalancer\",\"CreateTargetGroup\"]}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerTagNewLoadBalancers\"},{\"Action\":[\"ec2:AuthorizeSecurityGroupIngress\",\"ec2:DeleteSecurityGroup\",\"ec2:RevokeSecurityGroupIngress\",\"elasticloadbalancing:AddTags\",\"elasticloadbalancing:ApplySecurityGroupsToLoadBalancer\",\"elasticloadbalancing:AttachLoadBalancerToSubnets\",\"elasticloadbalancing:ConfigureHealthCheck\",\"elasticloadbalancing:CreateListener\",\"elasticloadbalancing:CreateLoadBalancerListeners\",\"elasticloadbalancing:CreateLoadBalancerPolicy\",\"elasticloadbalancing:DeleteListener\",\"elasticloadbalancing:DeleteLoadBalancer\",\"elasticloadbalancing:DeleteLoadBalancerListeners\",\"elasticloadbalancing:DeleteTargetGroup\",\"elasticloadbalancing:DeregisterInstancesFromLoadBalancer\",\"elasticloadbalancing:DeregisterTargets\",\"elasticloadbalancing:DetachLoadBalancerFromSubnets\",\"elasticloadbalancing:ModifyListener\",\"elasticloadbalancing:ModifyLoadBalancerAttributes\",\"elasticloadbalancing:ModifyTargetGroup\",\"elasticloadbalancing:RegisterInstancesWithLoadBalancer\",\"elasticloadbalancing:RegisterTargets\",\"elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer\",\"elasticloadbalancing:SetLoadBalancerPoliciesOfListener\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerManageOwned\"},{\"Action\":[\"iam:CreateServiceLinkedRole\"],\"Condition\":{\"StringEquals\":{\"iam:AWSServiceName\":\"elasticloadbalancing.amazonaws.com\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*\"],\"Sid\":\"CloudControllerElbServiceLinkedRole\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"ec2:DescribeVolumes\",\"ec2:DescribeVolumesModifications\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"EbsCsiRead\"},{\"Action\":[\"ec2:CreateVolume\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiCreateOwnedVolumes\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/volumes.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateVolume\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiTagNewVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\",\"ec2:ModifyVolume\",\"ec2:DeleteVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:ResourceTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiManageOwnedVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/volumes.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"EbsCsiAttachToOwnInstances\"},{\"Action\":[\"s3:PutObject\"],\"Condition\":{\"Null\":{\"s3:if-none-match\":\"false\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/audit/$${aws:userid}/*\"],\"Sid\":\"ShipOwnAuditLog\"},{\"Action\":[\"s3:GetObject\",\"s3:GetObjectVersion\"],\"Effect\":\"Deny\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/audit/*\"],\"Sid\":\"NeverReadAuditLog\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.control-plane-volumes-example-com.name
}

resource "aws_iam_role_policy" "nodes-volumes-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/nodes/nodes/*\",\"arn:aws:s3:::state/clusters/volumes.example.com/pki/kubernetes-ca/cert.pem\",\"arn:aws:s3:::state/clusters/volumes.example.com/pki/kubernetes-ca/*/cert.pem\",\"arn:aws:s3:::state/clusters/volumes.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"ReadNodeSpecs\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/volumes.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/volumes.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"ec2:DescribeInstances\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DescribeSelf\"},{\"Action\":[\"ecr:GetAuthorizationToken\",\"ecr:BatchCheckLayerAvailability\",\"ecr:GetDownloadUrlForLayer\",\"ecr:BatchGetImage\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"PullFromContainerRegistry\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.nodes-volumes-example-com.name
}

resource "aws_internet_gateway" "volumes-example-com" {
  tags = {
    "Name"                                      = "volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  vpc_id = aws_vpc.volumes-example-com.id
}

resource "aws_launch_template" "control-plane-a-volumes-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-a.volumes.example.com"
  tags = {
    "Name"                                      = "control-plane-a.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                = "control-plane-a"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogdm9sdW1lcy5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLWEKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHZvbHVtZXMuZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS1hL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogMDMyNDg5MGQ3YjgzOGVmNzNkNzQ5ZGExZjM3MmYxZDNlYzEwNzcxY2YxZDdiZTdiYTczYjMxM2E1MWM0MjhmZQo="

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
    arn = aws_iam_instance_profile.control-plane-volumes-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-volumes-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                      = "control-plane-a.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/node-spec-hash"                = "0324890d7b838ef73d749da1f372f1d3ec10771cf1d7be7ba73b313a51c428fe"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                      = "control-plane-a.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/node-spec-hash"                = "0324890d7b838ef73d749da1f372f1d3ec10771cf1d7be7ba73b313a51c428fe"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                      = "control-plane-a.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "control-plane-a"
      "ballast.dev/role"                          = "control-plane"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "nodes-volumes-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "nodes.volumes.example.com"
  tags = {
    "Name"                                      = "nodes.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"                = "nodes"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogdm9sdW1lcy5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBub2Rlcwpyb2xlOiBOb2RlCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IHZvbHVtZXMuZXhhbXBsZS5jb20vbm9kZXMvbm9kZXMvc3BlYy55YW1sCm5vZGVTcGVjU2hhMjU2OiBhMGNhZjEzMmNkZGY0ZTkxMzEyN2RmNDRlOTk2Mzg4MmQyYTU0OGUxNjA5MWExYjc1MzhhODY3ZmNkNGYzOTU4Cg=="

  block_device_mappings {
    device_name = data.aws_ami.ballast-k8s-1-33-debian-12.root_device_name

    ebs {
      delete_on_termination = true
      encrypted             = true
      volume_size           = 128
      volume_type           = "gp3"
    }
  }

  block_device_mappings {
    device_name = "/dev/sdf"

    ebs {
      delete_on_termination = true
      encrypted             = true
      volume_size           = 50
      volume_type           = "gp3"
    }
  }

  block_device_mappings {
    device_name = "/dev/xvdh"

    ebs {
      delete_on_termination = false
      encrypted             = true
      iops                  = 5000
      kms_key_id            = "alias/data"
      volume_size           = 100
      volume_type           = "io2"
    }
  }

  iam_instance_profile {
    arn = aws_iam_instance_profile.nodes-volumes-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-volumes-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                      = "nodes.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/node-spec-hash"                = "a0caf132cddf4e913127df44e9963882d2a548e16091a1b7538a867fcd4f3958"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                      = "nodes.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/node-spec-hash"                = "a0caf132cddf4e913127df44e9963882d2a548e16091a1b7538a867fcd4f3958"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                      = "nodes.volumes.example.com"
      "ballast.dev/cluster"                       = "volumes.example.com"
      "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"                = "nodes"
      "ballast.dev/role"                          = "node"
      "kubernetes.io/cluster/volumes.example.com" = "owned"
    }
  }
}

resource "aws_lb" "api-volumes-example-com-b3d9a5b7" {
  internal           = false
  load_balancer_type = "network"
  name               = "api-volumes-example-com-b3d9a5b7"
  subnets            = [aws_subnet.a-volumes-example-com.id]
  tags = {
    "Name"                                      = "api-volumes-example-com-b3d9a5b7"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
}

resource "aws_lb_listener" "api-volumes-example-com-b3d9a5b7-443" {
  load_balancer_arn = aws_lb.api-volumes-example-com-b3d9a5b7.arn
  port              = 443
  protocol          = "TCP"

  default_action {
    target_group_arn = aws_lb_target_group.tcp-volumes-example-com-b3d9a5b7.arn
    type             = "forward"
  }
}

resource "aws_lb_target_group" "tcp-volumes-example-com-b3d9a5b7" {
  name     = "tcp-volumes-example-com-b3d9a5b7"
  port     = 443
  protocol = "TCP"
  tags = {
    "Name"                                      = "api-volumes-example-com-b3d9a5b7"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  target_type = "instance"
  vpc_id      = aws_vpc.volumes-example-com.id

  health_check {
    protocol = "TCP"
  }
}

resource "aws_route" "route-public-volumes-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.volumes-example-com.id
  route_table_id         = aws_route_table.public-volumes-example-com.id
}

resource "aws_route_table" "public-volumes-example-com" {
  tags = {
    "Name"                                      = "public.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  vpc_id = aws_vpc.volumes-example-com.id
}

resource "aws_route_table_association" "a-volumes-example-com" {
  route_table_id = aws_route_table.public-volumes-example-com.id
  subnet_id      = aws_subnet.a-volumes-example-com.id
}

resource "aws_security_group" "control-plane-volumes-example-com" {
  description = "Control plane of the Kubernetes cluster volumes.example.com"
  name        = "control-plane.volumes.example.com"
  tags = {
    "Name"                                      = "control-plane.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  vpc_id = aws_vpc.volumes-example-com.id
}

resource "aws_security_group" "nodes-volumes-example-com" {
  description = "Nodes of the Kubernetes cluster volumes.example.com"
  name        = "nodes.volumes.example.com"
  tags = {
    "Name"                                      = "nodes.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
  }
  vpc_id = aws_vpc.volumes-example-com.id
}

resource "aws_security_group_rule" "control-plane-volumes-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.control-plane-volumes-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_security_group_rule" "from-0-0-0-0-0-ingress-tcp-443to443-control-plane-volumes-example-com" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "tcp 443-443 from 0.0.0.0/0"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-volumes-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-172-20-0-0-16-ingress-tcp-443to443-control-plane-volumes-example-com" {
  cidr_blocks       = ["172.20.0.0/16"]
  description       = "tcp 443-443 from 172.20.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-volumes-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-control-plane-volumes-example-com" {
  source_security_group_id = aws_security_group.control-plane-volumes-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.control-plane-volumes-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-nodes-volumes-example-com" {
  source_security_group_id = aws_security_group.control-plane-volumes-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-volumes-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-all-0to0-nodes-volumes-example-com" {
  source_security_group_id = aws_security_group.nodes-volumes-example-com.id
  description              = "all 0-0 from nodes"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-volumes-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-1to2378-control-plane-volumes-example-com" {
  source_security_group_id = aws_security_group.nodes-volumes-example-com.id
  description              = "tcp 1-2378 from nodes"
  from_port                = 1
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-volumes-example-com.id
  to_port                  = 2378
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-2381to65535-control-plane-volumes-example-com" {
  source_security_group_id = aws_security_group.nodes-volumes-example-com.id
  description              = "tcp 2381-65535 from nodes"
  from_port                = 2381
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-volumes-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-udp-1to65535-control-plane-volumes-example-com" {
  source_security_group_id = aws_security_group.nodes-volumes-example-com.id
  description              = "udp 1-65535 from nodes"
  from_port                = 1
  protocol                 = "udp"
  security_group_id        = aws_security_group.control-plane-volumes-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "nodes-volumes-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.nodes-volumes-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_subnet" "a-volumes-example-com" {
  availability_zone = "us-west-2a"
  cidr_block        = "10.0.0.0/20"
  tags = {
    "Name"                                      = "a.volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
    "kubernetes.io/role/elb"                    = "1"
  }
  vpc_id = aws_vpc.volumes-example-com.id
}

resource "aws_vpc" "volumes-example-com" {
  cidr_block           = "172.20.0.0/16"
  enable_dns_hostnames = true
  enable_dns_support   = true
  tags = {
    "Name"                                      = "volumes.example.com"
    "ballast.dev/cluster"                       = "volumes.example.com"
    "ballast.dev/cluster-id"                    = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/volumes.example.com" = "owned"
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
