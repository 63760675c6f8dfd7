output "api_lb_dns_name" {
  value = aws_lb.api-demo-example-com-b80da7a7.dns_name
}

output "cluster_name" {
  value = "demo.example.com"
}

output "master_security_group_ids" {
  value = [aws_security_group.control-plane-demo-example-com.id]
}

output "masters_role_arn" {
  value = aws_iam_role.control-plane-demo-example-com.arn
}

output "masters_role_name" {
  value = aws_iam_role.control-plane-demo-example-com.name
}

output "node_security_group_ids" {
  value = [aws_security_group.nodes-demo-example-com.id]
}

output "node_subnet_ids" {
  value = [aws_subnet.us-west-2a-demo-example-com.id, aws_subnet.us-west-2b-demo-example-com.id, aws_subnet.us-west-2c-demo-example-com.id]
}

output "nodes_role_arn" {
  value = aws_iam_role.nodes-demo-example-com.arn
}

output "nodes_role_name" {
  value = aws_iam_role.nodes-demo-example-com.name
}

output "region" {
  value = "us-west-2"
}

output "route_table_public_id" {
  value = aws_route_table.public-demo-example-com.id
}

output "subnet_ids" {
  value = [aws_subnet.us-west-2a-demo-example-com.id, aws_subnet.us-west-2b-demo-example-com.id, aws_subnet.us-west-2c-demo-example-com.id]
}

output "subnet_us-west-2a_id" {
  value = aws_subnet.us-west-2a-demo-example-com.id
}

output "subnet_us-west-2b_id" {
  value = aws_subnet.us-west-2b-demo-example-com.id
}

output "subnet_us-west-2c_id" {
  value = aws_subnet.us-west-2c-demo-example-com.id
}

output "vpc_cidr_block" {
  value = aws_vpc.demo-example-com.cidr_block
}

output "vpc_id" {
  value = aws_vpc.demo-example-com.id
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

resource "aws_autoscaling_group" "control-plane-us-west-2a-demo-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-us-west-2a.demo.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-demo-example-com-b80da7a7.arn]
  vpc_zone_identifier = [aws_subnet.us-west-2a-demo-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-us-west-2a-demo-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-us-west-2a.demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "control-plane-us-west-2a"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "control-plane"
  }

  tag {
    key                 = "kubernetes.io/cluster/demo.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "control-plane-us-west-2b-demo-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-us-west-2b.demo.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-demo-example-com-b80da7a7.arn]
  vpc_zone_identifier = [aws_subnet.us-west-2b-demo-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-us-west-2b-demo-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-us-west-2b.demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "control-plane-us-west-2b"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "control-plane"
  }

  tag {
    key                 = "kubernetes.io/cluster/demo.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "control-plane-us-west-2c-demo-example-com" {
  desired_capacity    = 1
  max_size            = 1
  min_size            = 1
  name                = "control-plane-us-west-2c.demo.example.com"
  target_group_arns   = [aws_lb_target_group.tcp-demo-example-com-b80da7a7.arn]
  vpc_zone_identifier = [aws_subnet.us-west-2c-demo-example-com.id]

  launch_template {
    id      = aws_launch_template.control-plane-us-west-2c-demo-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "control-plane-us-west-2c.demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster-id"
    propagate_at_launch = true
    value               = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
  }

  tag {
    key                 = "ballast.dev/instance-group"
    propagate_at_launch = true
    value               = "control-plane-us-west-2c"
  }

  tag {
    key                 = "ballast.dev/role"
    propagate_at_launch = true
    value               = "control-plane"
  }

  tag {
    key                 = "kubernetes.io/cluster/demo.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_autoscaling_group" "nodes-demo-example-com" {
  desired_capacity    = 2
  max_size            = 6
  min_size            = 2
  name                = "nodes.demo.example.com"
  vpc_zone_identifier = [aws_subnet.us-west-2a-demo-example-com.id, aws_subnet.us-west-2b-demo-example-com.id, aws_subnet.us-west-2c-demo-example-com.id]

  launch_template {
    id      = aws_launch_template.nodes-demo-example-com.id
    version = "$Default"
  }

  tag {
    key                 = "Name"
    propagate_at_launch = true
    value               = "nodes.demo.example.com"
  }

  tag {
    key                 = "ballast.dev/cluster"
    propagate_at_launch = true
    value               = "demo.example.com"
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
    key                 = "kubernetes.io/cluster/demo.example.com"
    propagate_at_launch = true
    value               = "owned"
  }
}

resource "aws_ebs_volume" "control-plane-us-west-2a-etcd-demo-example-com" {
  availability_zone = "us-west-2a"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                   = "control-plane-us-west-2a.etcd.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                = "control-plane-us-west-2a"
    "ballast.dev/instance-group"             = "control-plane-us-west-2a"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_ebs_volume" "control-plane-us-west-2b-etcd-demo-example-com" {
  availability_zone = "us-west-2b"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                   = "control-plane-us-west-2b.etcd.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                = "control-plane-us-west-2b"
    "ballast.dev/instance-group"             = "control-plane-us-west-2b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_ebs_volume" "control-plane-us-west-2c-etcd-demo-example-com" {
  availability_zone = "us-west-2c"
  encrypted         = true
  size              = 20
  tags = {
    "Name"                                   = "control-plane-us-west-2c.etcd.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/etcd-member"                = "control-plane-us-west-2c"
    "ballast.dev/instance-group"             = "control-plane-us-west-2c"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  type = "gp3"
}

resource "aws_iam_instance_profile" "control-plane-demo-example-com" {
  name = "control-plane.demo.example.com"
  role = aws_iam_role.control-plane-demo-example-com.name
}

resource "aws_iam_instance_profile" "nodes-demo-example-com" {
  name = "nodes.demo.example.com"
  role = aws_iam_role.nodes-demo-example-com.name
}

resource "aws_iam_role" "control-plane-demo-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "control-plane.demo.example.com"
  tags = {
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
}

resource "aws_iam_role" "nodes-demo-example-com" {
  assume_role_policy = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\"Principal\":{\"Service\":\"ec2.amazonaws.com\"},\"Action\":\"sts:AssumeRole\"}]}"
  name               = "nodes.demo.example.com"
  tags = {
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
}

resource "aws_iam_role_policy" "control-plane-demo-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/*\"],\"Sid\":\"ReadClusterState\"},{\"Action\":[\"s3:PutObject\",\"s3:DeleteObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/etcd/*\",\"arn:aws:s3:::state/clusters/demo.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"WriteEtcd\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/demo.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"s3:ListBucket\"],\"Condition\":{\"StringLike\":{\"s3:prefix\":[\"clusters/demo.example.com/*\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state\"],\"Sid\":\"ListClusterState\"},{\"Action\":[\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"autoscaling:DescribeAutoScalingGroups\",\"autoscaling:DescribeAutoScalingInstances\",\"elasticloadbalancing:DescribeLoadBalancers\",\"elasticloadbalancing:DescribeTargetGroups\",\"elasticloadbalancing:DescribeTargetHealth\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DiscoverPeers\"},{\"Action\":[\"iam:GetInstanceProfile\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"VerifyNodeProfiles\"},{\"Action\":[\"ec2:DescribeVolumes\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"FindEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"AttachOwnEtcdVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"ec2:ResourceTag/ballast.dev/role\":\"control-plane\",\"ec2:ResourceTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"AttachToOwnControlPlane\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeRegions\",\"ec2:DescribeRouteTables\",\"ec2:DescribeSecurityGroups\",\"ec2:DescribeSubnets\",\"ec2:DescribeVolumes\",\"ec2:DescribeVpcs\",\"elasticloadbalancing:Describe*\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerRead\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:vpc/*\"],\"Sid\":\"CloudControllerCreateSecurityGroupInVpc\"},{\"Action\":[\"ec2:CreateSecurityGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerCreateOwnedSecurityGroups\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateSecurityGroup\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:security-group/*\"],\"Sid\":\"CloudControllerTagNewSecurityGroups\"},{\"Action\":[\"elasticloadbalancing:CreateLoadBalancer\",\"elasticloadbalancing:CreateTargetGroup\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerCreateOwnedLoadBalancers\"},{\"Action\":[\"elasticloadbalancing:AddTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\",\"elasticloadbalancing:CreateAction\":[\"CreateLoadBalancer\",\"CreateTargetGroup\"]}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerTagNewLoadBalancers\"},{\"Action\":[\"ec2:AuthorizeSecurityGroupIngress\",\"ec2:DeleteSecurityGroup\",\"ec2:RevokeSecurityGroupIngress\",\"elasticloadbalancing:AddTags\",\"elasticloadbalancing:ApplySecurityGroupsToLoadBalancer\",\"elasticloadbalancing:AttachLoadBalancerToSubnets\",\"elasticloadbalancing:ConfigureHealthCheck\",\"elasticloadbalancing:CreateListener\",\"elasticloadbalancing:CreateLoadBalancerListeners\",\"elasticloadbalancing:CreateLoadBalancerPolicy\",\"elasticloadbalancing:DeleteListener\",\"elasticloadbalancing:DeleteLoadBalancer\",\"elasticloadbalancing:DeleteLoadBalancerListeners\",\"elasticloadbalancing:DeleteTargetGroup\",\"elasticloadbalancing:DeregisterInstancesFromLoadBalancer\",\"elasticloadbalancing:DeregisterTargets\",\"elasticloadbalancing:DetachLoadBalancerFromSubnets\",\"elasticloadbalancing:ModifyListener\",\"elasticloadbalancing:ModifyLoadBalancerAttributes\",\"elasticloadbalancing:ModifyTargetGroup\",\"elasticloadbalancing:RegisterInstancesWithLoadBalancer\",\"elasticloadbalancing:RegisterTargets\",\"elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer\",\"elasticloadbalancing:SetLoadBalancerPoliciesOfListener\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"CloudControllerManageOwned\"},{\"Action\":[\"iam:CreateServiceLinkedRole\"],\"Condition\":{\"StringEquals\":{\"iam:AWSServiceName\":\"elasticloadbalancing.amazonaws.com\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*\"],\"Sid\":\"CloudControllerElbServiceLinkedRole\"},{\"Action\":[\"ec2:DescribeAvailabilityZones\",\"ec2:DescribeInstances\",\"ec2:DescribeTags\",\"ec2:DescribeVolumes\",\"ec2:DescribeVolumesModifications\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"EbsCsiRead\"},{\"Action\":[\"ec2:CreateVolume\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiCreateOwnedVolumes\"},{\"Action\":[\"ec2:CreateTags\"],\"Condition\":{\"StringEquals\":{\"aws:RequestTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:RequestTag/kubernetes.io/cluster/demo.example.com\":\"owned\",\"ec2:CreateAction\":[\"CreateVolume\"]}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiTagNewVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\",\"ec2:ModifyVolume\",\"ec2:DeleteVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/ebs.csi.aws.com/cluster\":\"true\",\"aws:ResourceTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:volume/*\"],\"Sid\":\"EbsCsiManageOwnedVolumes\"},{\"Action\":[\"ec2:AttachVolume\",\"ec2:DetachVolume\"],\"Condition\":{\"StringEquals\":{\"aws:ResourceTag/kubernetes.io/cluster/demo.example.com\":\"owned\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:ec2:*:*:instance/*\"],\"Sid\":\"EbsCsiAttachToOwnInstances\"},{\"Action\":[\"s3:PutObject\"],\"Condition\":{\"Null\":{\"s3:if-none-match\":\"false\"}},\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/audit/$${aws:userid}/*\"],\"Sid\":\"ShipOwnAuditLog\"},{\"Action\":[\"s3:GetObject\",\"s3:GetObjectVersion\"],\"Effect\":\"Deny\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/audit/*\"],\"Sid\":\"NeverReadAuditLog\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.control-plane-demo-example-com.name
}

resource "aws_iam_role_policy" "nodes-demo-example-com" {
  name   = "ballast"
  policy = "{\"Statement\":[{\"Action\":[\"s3:GetObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/nodes/nodes/*\",\"arn:aws:s3:::state/clusters/demo.example.com/pki/kubernetes-ca/cert.pem\",\"arn:aws:s3:::state/clusters/demo.example.com/pki/kubernetes-ca/*/cert.pem\",\"arn:aws:s3:::state/clusters/demo.example.com/control-plane/node-bootstrap.json\"],\"Sid\":\"ReadNodeSpecs\"},{\"Action\":[\"s3:PutObject\"],\"Effect\":\"Allow\",\"Resource\":[\"arn:aws:s3:::state/clusters/demo.example.com/reports/$${aws:userid}.json\",\"arn:aws:s3:::state/clusters/demo.example.com/logs/$${aws:userid}.json\"],\"Sid\":\"WriteOwnReportAndLogTail\"},{\"Action\":[\"ec2:DescribeInstances\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"DescribeSelf\"},{\"Action\":[\"ecr:GetAuthorizationToken\",\"ecr:BatchCheckLayerAvailability\",\"ecr:GetDownloadUrlForLayer\",\"ecr:BatchGetImage\"],\"Effect\":\"Allow\",\"Resource\":\"*\",\"Sid\":\"PullFromContainerRegistry\"}],\"Version\":\"2012-10-17\"}"
  role   = aws_iam_role.nodes-demo-example-com.name
}

resource "aws_internet_gateway" "demo-example-com" {
  tags = {
    "Name"                                   = "demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_launch_template" "control-plane-us-west-2a-demo-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-us-west-2a.demo.example.com"
  tags = {
    "Name"                                   = "control-plane-us-west-2a.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "control-plane-us-west-2a"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogZGVtby5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLXVzLXdlc3QtMmEKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IGRlbW8uZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS11cy13ZXN0LTJhL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogNjk0YWE3MDRmZGFjMjRmYWNhMzRmYmQ0Yjc1Mzc3NTY4ZDQwMjQ4YTBhOWQyM2QwZDg3OGEyY2ZmMGU1ZjQzMgo="

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
    arn = aws_iam_instance_profile.control-plane-demo-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-demo-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "control-plane-us-west-2a.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2a"
      "ballast.dev/node-spec-hash"             = "694aa704fdac24faca34fbd4b75377568d40248a0a9d23d0d878a2cff0e5f432"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "control-plane-us-west-2a.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2a"
      "ballast.dev/node-spec-hash"             = "694aa704fdac24faca34fbd4b75377568d40248a0a9d23d0d878a2cff0e5f432"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "control-plane-us-west-2a.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2a"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "control-plane-us-west-2b-demo-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-us-west-2b.demo.example.com"
  tags = {
    "Name"                                   = "control-plane-us-west-2b.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "control-plane-us-west-2b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogZGVtby5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLXVzLXdlc3QtMmIKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IGRlbW8uZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS11cy13ZXN0LTJiL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogMWQyZTUxNTYxYzMyZDM1ODhiZjU4YjZjYzIxOTRhM2Q3YTBiMDE1MTg4ZGU4YWVhNTQ5MGUzZjc4MGY2ZmY3Mgo="

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
    arn = aws_iam_instance_profile.control-plane-demo-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-demo-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "control-plane-us-west-2b.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2b"
      "ballast.dev/node-spec-hash"             = "1d2e51561c32d3588bf58b6cc2194a3d7a0b015188de8aea5490e3f780f6ff72"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "control-plane-us-west-2b.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2b"
      "ballast.dev/node-spec-hash"             = "1d2e51561c32d3588bf58b6cc2194a3d7a0b015188de8aea5490e3f780f6ff72"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "control-plane-us-west-2b.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2b"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "control-plane-us-west-2c-demo-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "control-plane-us-west-2c.demo.example.com"
  tags = {
    "Name"                                   = "control-plane-us-west-2c.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "control-plane-us-west-2c"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogZGVtby5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBjb250cm9sLXBsYW5lLXVzLXdlc3QtMmMKcm9sZTogQ29udHJvbFBsYW5lCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IGRlbW8uZXhhbXBsZS5jb20vbm9kZXMvY29udHJvbC1wbGFuZS11cy13ZXN0LTJjL3NwZWMueWFtbApub2RlU3BlY1NoYTI1NjogNmVkODE0ZWI4ZjE1NzVkNWRjNGJkYzliNjNiZDhhYmUwNTdjNDYzODFjNjViMTZhYmEyMjFmY2RkM2RjYjJhNgo="

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
    arn = aws_iam_instance_profile.control-plane-demo-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.control-plane-demo-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "control-plane-us-west-2c.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2c"
      "ballast.dev/node-spec-hash"             = "6ed814eb8f1575d5dc4bdc9b63bd8abe057c46381c65b16aba221fcdd3dcb2a6"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "control-plane-us-west-2c.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2c"
      "ballast.dev/node-spec-hash"             = "6ed814eb8f1575d5dc4bdc9b63bd8abe057c46381c65b16aba221fcdd3dcb2a6"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "control-plane-us-west-2c.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "control-plane-us-west-2c"
      "ballast.dev/role"                       = "control-plane"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }
}

resource "aws_launch_template" "nodes-demo-example-com" {
  image_id      = data.aws_ami.ballast-k8s-1-33-debian-12.id
  instance_type = "t3.medium"
  name          = "nodes.demo.example.com"
  tags = {
    "Name"                                   = "nodes.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "ballast.dev/instance-group"             = "nodes"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  user_data = "I2JhbGxhc3QtYm9vdC1jb25maWcKYXBpVmVyc2lvbjogYmFsbGFzdC5kZXYvdjFhbHBoYTEKa2luZDogQm9vdENvbmZpZwpjbHVzdGVyTmFtZTogZGVtby5leGFtcGxlLmNvbQppbnN0YW5jZUdyb3VwOiBub2Rlcwpyb2xlOiBOb2RlCnN0YXRlU3RvcmU6IHMzOi8vc3RhdGUvY2x1c3RlcnMKbm9kZVNwZWM6IGRlbW8uZXhhbXBsZS5jb20vbm9kZXMvbm9kZXMvc3BlYy55YW1sCm5vZGVTcGVjU2hhMjU2OiAzMDk5OWFmMTJiZTFlZTYxZjYxMGU4MjQwM2VmZDNhZmJmNjFhMWI1MWQ5NDBmYzM0YWNmZGNhZTcwYjdmYTlhCg=="

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
    arn = aws_iam_instance_profile.nodes-demo-example-com.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.nodes-demo-example-com.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_put_response_hop_limit = 1
    http_tokens                 = "required"
  }

  tag_specifications {
    resource_type = "instance"
    tags = {
      "Name"                                   = "nodes.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/node-spec-hash"             = "30999af12be1ee61f610e82403efd3afbf61a1b51d940fc34acfdcae70b7fa9a"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "volume"
    tags = {
      "Name"                                   = "nodes.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/node-spec-hash"             = "30999af12be1ee61f610e82403efd3afbf61a1b51d940fc34acfdcae70b7fa9a"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }

  tag_specifications {
    resource_type = "network-interface"
    tags = {
      "Name"                                   = "nodes.demo.example.com"
      "ballast.dev/cluster"                    = "demo.example.com"
      "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
      "ballast.dev/instance-group"             = "nodes"
      "ballast.dev/role"                       = "node"
      "kubernetes.io/cluster/demo.example.com" = "owned"
    }
  }
}

resource "aws_lb" "api-demo-example-com-b80da7a7" {
  internal           = false
  load_balancer_type = "network"
  name               = "api-demo-example-com-b80da7a7"
  security_groups    = ["sg-0123456789abcdef0", "sg-0aaaaaaa"]
  subnets            = [aws_subnet.us-west-2a-demo-example-com.id, aws_subnet.us-west-2b-demo-example-com.id, aws_subnet.us-west-2c-demo-example-com.id]
  tags = {
    "Name"                                   = "api-demo-example-com-b80da7a7"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
}

resource "aws_lb_listener" "api-demo-example-com-b80da7a7-443" {
  load_balancer_arn = aws_lb.api-demo-example-com-b80da7a7.arn
  port              = 443
  protocol          = "TCP"

  default_action {
    target_group_arn = aws_lb_target_group.tcp-demo-example-com-b80da7a7.arn
    type             = "forward"
  }
}

resource "aws_lb_target_group" "tcp-demo-example-com-b80da7a7" {
  name     = "tcp-demo-example-com-b80da7a7"
  port     = 443
  protocol = "TCP"
  tags = {
    "Name"                                   = "api-demo-example-com-b80da7a7"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  target_type = "instance"
  vpc_id      = aws_vpc.demo-example-com.id

  health_check {
    protocol = "TCP"
  }
}

resource "aws_route" "route-public-demo-example-com-0-0-0-0--0" {
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.demo-example-com.id
  route_table_id         = aws_route_table.public-demo-example-com.id
}

resource "aws_route_table" "public-demo-example-com" {
  tags = {
    "Name"                                   = "public.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_route_table_association" "us-west-2a-demo-example-com" {
  route_table_id = aws_route_table.public-demo-example-com.id
  subnet_id      = aws_subnet.us-west-2a-demo-example-com.id
}

resource "aws_route_table_association" "us-west-2b-demo-example-com" {
  route_table_id = aws_route_table.public-demo-example-com.id
  subnet_id      = aws_subnet.us-west-2b-demo-example-com.id
}

resource "aws_route_table_association" "us-west-2c-demo-example-com" {
  route_table_id = aws_route_table.public-demo-example-com.id
  subnet_id      = aws_subnet.us-west-2c-demo-example-com.id
}

resource "aws_security_group" "control-plane-demo-example-com" {
  description = "Control plane of the Kubernetes cluster demo.example.com"
  name        = "control-plane.demo.example.com"
  tags = {
    "Name"                                   = "control-plane.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_security_group" "nodes-demo-example-com" {
  description = "Nodes of the Kubernetes cluster demo.example.com"
  name        = "nodes.demo.example.com"
  tags = {
    "Name"                                   = "nodes.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_security_group_rule" "control-plane-demo-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.control-plane-demo-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_security_group_rule" "from-0-0-0-0-0-ingress-tcp-443to443-control-plane-demo-example-com" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "tcp 443-443 from 0.0.0.0/0"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-demo-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-172-20-0-0-16-ingress-tcp-443to443-control-plane-demo-example-com" {
  cidr_blocks       = ["172.20.0.0/16"]
  description       = "tcp 443-443 from 172.20.0.0/16"
  from_port         = 443
  protocol          = "tcp"
  security_group_id = aws_security_group.control-plane-demo-example-com.id
  to_port           = 443
  type              = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-control-plane-demo-example-com" {
  source_security_group_id = aws_security_group.control-plane-demo-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.control-plane-demo-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-control-plane-ingress-all-0to0-nodes-demo-example-com" {
  source_security_group_id = aws_security_group.control-plane-demo-example-com.id
  description              = "all 0-0 from control-plane"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-demo-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-all-0to0-nodes-demo-example-com" {
  source_security_group_id = aws_security_group.nodes-demo-example-com.id
  description              = "all 0-0 from nodes"
  from_port                = 0
  protocol                 = "-1"
  security_group_id        = aws_security_group.nodes-demo-example-com.id
  to_port                  = 0
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-1to2378-control-plane-demo-example-com" {
  source_security_group_id = aws_security_group.nodes-demo-example-com.id
  description              = "tcp 1-2378 from nodes"
  from_port                = 1
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-demo-example-com.id
  to_port                  = 2378
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-tcp-2381to65535-control-plane-demo-example-com" {
  source_security_group_id = aws_security_group.nodes-demo-example-com.id
  description              = "tcp 2381-65535 from nodes"
  from_port                = 2381
  protocol                 = "tcp"
  security_group_id        = aws_security_group.control-plane-demo-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "from-nodes-ingress-udp-1to65535-control-plane-demo-example-com" {
  source_security_group_id = aws_security_group.nodes-demo-example-com.id
  description              = "udp 1-65535 from nodes"
  from_port                = 1
  protocol                 = "udp"
  security_group_id        = aws_security_group.control-plane-demo-example-com.id
  to_port                  = 65535
  type                     = "ingress"
}

resource "aws_security_group_rule" "nodes-demo-example-com-egress-all-0to0-0-0-0-0--0" {
  cidr_blocks       = ["0.0.0.0/0"]
  description       = "all outbound traffic, as EC2 gives every new group"
  from_port         = 0
  protocol          = "-1"
  security_group_id = aws_security_group.nodes-demo-example-com.id
  to_port           = 0
  type              = "egress"
}

resource "aws_subnet" "us-west-2a-demo-example-com" {
  availability_zone = "us-west-2a"
  cidr_block        = "172.20.0.0/19"
  tags = {
    "Name"                                   = "us-west-2a.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
    "kubernetes.io/role/elb"                 = "1"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_subnet" "us-west-2b-demo-example-com" {
  availability_zone = "us-west-2b"
  cidr_block        = "172.20.32.0/19"
  tags = {
    "Name"                                   = "us-west-2b.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
    "kubernetes.io/role/elb"                 = "1"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_subnet" "us-west-2c-demo-example-com" {
  availability_zone = "us-west-2c"
  cidr_block        = "172.20.64.0/19"
  tags = {
    "Name"                                   = "us-west-2c.demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
    "kubernetes.io/role/elb"                 = "1"
  }
  vpc_id = aws_vpc.demo-example-com.id
}

resource "aws_vpc" "demo-example-com" {
  cidr_block           = "172.20.0.0/16"
  enable_dns_hostnames = true
  enable_dns_support   = true
  tags = {
    "Name"                                   = "demo.example.com"
    "ballast.dev/cluster"                    = "demo.example.com"
    "ballast.dev/cluster-id"                 = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"
    "kubernetes.io/cluster/demo.example.com" = "owned"
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
