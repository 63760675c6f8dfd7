#!/usr/bin/env python3
"""Ballast's local-cloud AWS control plane: moto 5.2.5 with the bugs that matter patched.

Run with the venv made from requirements.lock:

    $VENV/bin/python launcher.py --host 127.0.0.1 --port PORT [--exit-with-stdin]
                                 [--iam-enforce --initial-no-auth N [--ec2-service-user NAME]]

Prints exactly one line `ready http://HOST:PORT` on stdout once the server accepts connections;
everything else goes to stderr.

Every patch below replaces or wraps a moto internal, so it is only valid for the exact moto version
pinned in requirements.txt: the launcher refuses to start on any other version rather than patch
code it was not written against.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import socket
import sys
import threading

PINNED_MOTO_VERSION = "5.2.5"

log = logging.getLogger("ballast-emulator")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="moto 5.2.5 with Ballast's patches")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (use loopback)")
    p.add_argument("--port", type=int, required=True, help="port to bind (0 = pick a free one)")
    p.add_argument(
        "--exit-with-stdin",
        action="store_true",
        help="exit as soon as stdin reaches EOF (i.e. when the parent that holds the pipe dies)",
    )
    p.add_argument(
        "--iam-enforce",
        action="store_true",
        help="enforce IAM policies after the first --initial-no-auth requests",
    )
    p.add_argument(
        "--initial-no-auth",
        type=int,
        default=None,
        metavar="N",
        help="with --iam-enforce: number of requests let through unauthenticated",
    )
    p.add_argument(
        "--ec2-service-user",
        default=None,
        metavar="NAME",
        help="IAM user that plays the EC2 service: trust policies naming the service principal "
        "ec2.amazonaws.com let it AssumeRole (how the local IMDS gets instance-profile credentials)",
    )
    args = p.parse_args(argv)
    if args.ec2_service_user and not args.iam_enforce:
        p.error("--ec2-service-user only makes sense with --iam-enforce")
    if args.iam_enforce and (args.initial_no_auth is None or args.initial_no_auth < 0):
        p.error("--iam-enforce needs --initial-no-auth N (N >= 0)")
    if args.initial_no_auth is not None and not args.iam_enforce:
        p.error("--initial-no-auth only makes sense with --iam-enforce")
    return args


def configure_environment(args: argparse.Namespace) -> None:
    """Must run BEFORE the first `import moto`: moto/settings.py reads these at import time
    (INITIAL_NO_AUTH_ACTION_COUNT = float(os.environ.get(..., inf))) and never again."""
    if args.iam_enforce:
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(args.initial_no_auth)
    else:
        # An inherited variable must not switch enforcement on behind the caller's back.
        os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
    # moto.server.main sets this too; a few services build URLs from it.
    os.environ["MOTO_PORT"] = str(args.port)


# ---------------------------------------------------------------------------------------------
# Patches. Each one names the moto bug it fixes, why Ballast needs the fix, and the internals it
# relies on. All are applied by apply_patches() before the server is created.
# ---------------------------------------------------------------------------------------------


def patch_launch_template_version_user_data_and_source_version() -> None:
    """Bugs 1 and 2: CreateLaunchTemplateVersion.

    Bug 1: moto stores LaunchTemplateData.UserData of a new version as the raw request string,
    whereas CreateLaunchTemplate wraps it in Base64EncodedString. LaunchTemplateVersion.user_data
    asserts the wrapper type, so the next ASG launch from that version dies with HTTP 500.
    Bug 2: SourceVersion is ignored, so a new version holds only the fields sent, while on AWS it
    is the source version's data with the sent fields overriding (top-level keys).

    Ballast rolls out a changed node config by creating a new launch template version (new
    user-data, often with SourceVersion) and launching instances from it; both bugs break that.

    Internals: moto.ec2.responses.launch_templates.LaunchTemplates.create_launch_template_version
    (replaced whole; its response shape is copied), EC2BaseResponse._get_param, parse_user_data,
    LaunchTemplate.get_version/create_version/is_default, LaunchTemplateVersion.data.
    """
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import InvalidLaunchTemplateVersionNotFound, MissingParameterError
    from moto.ec2.responses.launch_templates import LaunchTemplates
    from moto.ec2.utils import parse_user_data

    def create_launch_template_version(self):  # type: ignore[no-untyped-def]
        name = self._get_param("LaunchTemplateName")
        tmpl_id = self._get_param("LaunchTemplateId")
        if tmpl_id:
            template = self.ec2_backend.get_launch_template(tmpl_id)
        elif name:
            template = self.ec2_backend.get_launch_template_by_name(name)
        else:
            raise MissingParameterError("launch template ID or launch template name")

        version_description = self._get_param("VersionDescription")
        sent = self._get_param("LaunchTemplateData", {})
        # Same handling as CreateLaunchTemplate: keep the base64 text as sent, wrapped so that
        # instances decode it and DescribeInstanceAttribute returns it unchanged.
        if "UserData" in sent:
            sent["UserData"] = parse_user_data(self._get_param("LaunchTemplateData.UserData"))

        source = self._get_param("SourceVersion")
        if source is not None:
            # moto's get_version maps "0" to the last version (list index -1) and raises a bare
            # ValueError (HTTP 500) on garbage; AWS answers VersionNotFound for both.
            src = str(source)
            if not (src.lower() in ("$latest", "$default") or (src.isdigit() and int(src) >= 1)):
                raise InvalidLaunchTemplateVersionNotFound(version=src, template_id=template.id)
            data = copy.deepcopy(template.get_version(src).data)
            data.update(sent)  # AWS: "parameters you specify override the source version's"
        else:
            data = sent

        self.error_on_dryrun()
        version = template.create_version(data, version_description)
        result = {
            "LaunchTemplateVersion": {
                "CreateTime": version.create_time,
                "CreatedBy": f"arn:{self.partition}:iam::{self.current_account}:root",
                "DefaultVersion": template.is_default(version),
                "LaunchTemplateData": version.data,
                "LaunchTemplateId": template.id,
                "LaunchTemplateName": template.name,
                "VersionDescription": version.description,
                "VersionNumber": version.number,
            },
        }
        return ActionResult(result)

    LaunchTemplates.create_launch_template_version = create_launch_template_version


def patch_asg_az_balanced_launch() -> None:
    """Bug 3 (and bug 4): ASG launches.

    Bug 3: FakeAutoScalingGroup.replace_autoscaling_group_instances puts every instance into the
    first subnet of VPCZoneIdentifier. AWS spreads a group over its AZs: each new instance goes to
    the AZ with the fewest instances of the group. Ballast spreads control-plane nodes (and etcd
    members) over AZs through one ASG per AZ or one multi-AZ group, and its validation checks
    node placement, so this must behave like AWS. This one method serves group creation,
    scale-out (SetDesiredCapacity / UpdateAutoScalingGroup) and replacement of terminated
    instances (AutoScalingBackend.notify_terminate_instances), so all three are fixed here.

    Bug 4: moto passed {"LaunchTemplateId": id} without the group's Version to run_instances, so
    the instance's aws:ec2launchtemplate:version tag, its BlockDeviceMappings, and its
    TagSpecifications tags came from the template's *default* version instead of the version the
    group uses. We pass the group's version (e.g. "$Latest" or "3").

    Internals: FakeAutoScalingGroup.{vpc_zone_identifier, availability_zones, instance_states,
    ec2_launch_template, launch_template_version, launch_config, instance_tags, image_id,
    user_data, security_groups, instance_type, new_instances_protected_from_scale_in, name},
    InstanceState, ASG_NAME_TAG, EC2Backend.get_subnet/run_instances (count/subnet_id/placement/
    launch_template kwargs), Instance.placement.zone and Instance.subnet_id.
    """
    from moto.autoscaling.models import ASG_NAME_TAG, FakeAutoScalingGroup, InstanceState

    def replace_autoscaling_group_instances(self, count_needed, propagated_tags):  # type: ignore[no-untyped-def]
        propagated_tags[ASG_NAME_TAG] = self.name
        propagated_tags.update(self.instance_tags)

        ec2 = self.autoscaling_backend.ec2_backend
        # Candidate slots in the group's order: (az, subnet_id or None).
        if self.vpc_zone_identifier:
            subnet_ids = [s.strip() for s in self.vpc_zone_identifier.split(",") if s.strip()]
            slots = [(ec2.get_subnet(s).availability_zone, s) for s in subnet_ids]
        else:
            slots = [(az, None) for az in self.availability_zones]

        associate_public_ip = (
            self.launch_config.associate_public_ip_address if self.launch_config else None
        )
        launch_template = None
        if self.ec2_launch_template:
            launch_template = {"LaunchTemplateId": self.ec2_launch_template.id}
            version = getattr(self, "launch_template_version", None)
            if version:
                launch_template["Version"] = str(version)

        for _ in range(count_needed):
            # Balance over InService instances (what AWS balances; Standby ones do not count).
            per_az: dict[str, int] = {}
            per_subnet: dict[str | None, int] = {}
            for state in self.active_instances():
                inst = state.instance
                per_az[inst.placement.zone] = per_az.get(inst.placement.zone, 0) + 1
                per_subnet[inst.subnet_id] = per_subnet.get(inst.subnet_id, 0) + 1
            # Fewest in the AZ first, then fewest in the subnet; ties keep the group's order.
            az, subnet_id = min(
                slots, key=lambda s: (per_az.get(s[0], 0), per_subnet.get(s[1], 0))
            )
            reservation = ec2.run_instances(
                self.image_id,
                1,
                self.user_data,
                self.security_groups,
                instance_type=self.instance_type,
                tags={"instance": dict(propagated_tags)},
                placement=az,
                launch_config=self.launch_config,
                launch_template=launch_template,
                is_instance_type_default=False,
                associate_public_ip=associate_public_ip,
                subnet_id=subnet_id,
            )
            for instance in reservation.instances:
                instance.autoscaling_group = self
                self.instance_states.append(
                    InstanceState(
                        instance,
                        protected_from_scale_in=self.new_instances_protected_from_scale_in,
                    )
                )

    FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances


def patch_asg_az_balanced_scale_in() -> None:
    """Bug 6: scale-in removes the first unprotected entries of instance_states (oldest first,
    and after any earlier scale-in an arbitrary order, since moto rebuilds the list from a set),
    with no AZ balancing. AWS's default termination policy picks the AZ with the most instances
    (among AZs that have an unprotected one), then the oldest instance there. Without this, a
    Ballast scale-in test could leave a group lopsided and its AZ checks would fail.

    Rather than copy moto's long set_desired_capacity (mixed-instances arithmetic), we wrap it
    and first reorder instance_states into termination priority: moto then takes a prefix of
    the unprotected entries, and the prefix of a greedy order is the greedy choice for any count.

    Internals: FakeAutoScalingGroup.set_desired_capacity taking
    `[s for s in self.instance_states if not s.protected_from_scale_in][:count]`;
    InstanceState.{instance, lifecycle_state, protected_from_scale_in}; Instance.launch_time.
    """
    from moto.autoscaling.models import FakeAutoScalingGroup

    original = FakeAutoScalingGroup.set_desired_capacity

    def termination_order(states):  # type: ignore[no-untyped-def]
        in_service = [s for s in states if s.lifecycle_state == "InService"]
        others = [s for s in states if s.lifecycle_state != "InService"]
        counts: dict[str, int] = {}
        for s in in_service:
            counts[s.instance.placement.zone] = counts.get(s.instance.placement.zone, 0) + 1
        candidates = sorted(
            (s for s in in_service if not s.protected_from_scale_in),
            key=lambda s: (s.instance.launch_time, s.instance.id),
        )
        ordered = []
        while candidates:
            # AZ with most instances; tie -> the AZ holding the oldest candidate (then by name).
            def rank(s):  # type: ignore[no-untyped-def]
                return (-counts[s.instance.placement.zone], s.instance.launch_time, s.instance.id)

            victim = min(candidates, key=rank)
            candidates.remove(victim)
            counts[victim.instance.placement.zone] -= 1
            ordered.append(victim)
        protected = [s for s in in_service if s.protected_from_scale_in]
        # Non-InService (e.g. Standby) last: moto would otherwise pick them too.
        return ordered + protected + others

    def set_desired_capacity(self, new_capacity):  # type: ignore[no-untyped-def]
        self.instance_states = termination_order(self.instance_states)
        return original(self, new_capacity)

    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity


def patch_asg_instance_reports_its_version() -> None:
    """Bug 4 (report side): InstanceState.launch_template (DescribeAutoScalingInstances and
    DescribeAutoScalingGroups' Instances[].LaunchTemplate) always reports the template's current
    default version. With the launch fix above, each instance carries the version it was really
    launched from in its aws:ec2launchtemplate:version tag (as on AWS); report that.

    Internals: InstanceState.launch_template (a property), TaggedEC2Resource.get_tags (records
    with lowercase keys).
    """
    from moto.autoscaling.models import InstanceState

    def launch_template(self):  # type: ignore[no-untyped-def]
        group = self.auto_scaling_group
        if group is None or group.ec2_launch_template is None:
            return None
        # EC2's internal tag records use lowercase "key"/"value".
        tags = {t["key"]: t["value"] for t in self.instance.get_tags()}
        version = tags.get("aws:ec2launchtemplate:version") or str(
            group.ec2_launch_template.default_version_number
        )
        return {
            "LaunchTemplateId": group.ec2_launch_template.id,
            "LaunchTemplateName": group.ec2_launch_template.name,
            "Version": version,
        }

    InstanceState.launch_template = property(launch_template)


def patch_launch_template_profile_and_metadata_options() -> None:
    """Bug 5: IamInstanceProfile and MetadataOptions of a launch template are not applied to
    instances launched from it (moto only applies them when given to RunInstances directly, and
    the ASG never does). Ballast's nodes get their AWS credentials through the instance profile
    (the local cloud's IMDS looks it up in DescribeInstances) and Ballast requires IMDSv2
    (HttpTokens=required, hop limit 1 or 2), which validation checks per instance.

    We wrap EC2Backend.run_instances (the backend, so ASG launches, RunInstances with a
    LaunchTemplate and fleets all get it): the template version's MetadataOptions become the
    defaults under any explicitly sent ones, and its IamInstanceProfile (Name or Arn) is
    associated with EVERY instance of the reservation unless RunInstances named a profile itself
    (then moto's response layer associates that one, and a second association would fail). The
    profile is resolved before launching, so an unknown profile fails the call cleanly instead
    of leaving profile-less instances.

    Internals: InstanceBackend.run_instances(image_id, count, user_data, security_group_names,
    **kwargs) with kwargs launch_template / metadata_options / iam_instance_profile_name|arn;
    EC2Backend._get_template_from_args; moto.ec2.utils.filter_iam_instance_profiles;
    IamInstanceProfileAssociationBackend.associate_iam_instance_profile (sets
    Instance.iam_instance_profile = {"Arn", "Id"}); Instance.metadata_options via
    MetadataOptions(dict).
    """
    from moto.ec2.exceptions import InvalidParameterValue
    from moto.ec2.models.instances import InstanceBackend
    from moto.ec2.utils import filter_iam_instance_profiles

    original = InstanceBackend.run_instances

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):  # type: ignore[no-untyped-def]
        profile = None
        if kwargs.get("launch_template"):
            data = self._get_template_from_args(kwargs["launch_template"]).data
            lt_md = data.get("MetadataOptions") or {}
            if lt_md:
                merged = dict(lt_md)
                merged.update(kwargs.get("metadata_options") or {})
                kwargs["metadata_options"] = merged
            explicit = kwargs.get("iam_instance_profile_name") or kwargs.get(
                "iam_instance_profile_arn"
            )
            profile = None if explicit else (data.get("IamInstanceProfile") or None)
            if profile:
                found = filter_iam_instance_profiles(
                    self.account_id,
                    partition=self.partition,
                    iam_instance_profile_arn=profile.get("Arn"),
                    iam_instance_profile_name=profile.get("Name"),
                )
                if found is None:  # Name and Arn given but naming different profiles
                    raise InvalidParameterValue(
                        f"Value ({profile}) for parameter iamInstanceProfile is invalid."
                    )
        reservation = original(
            self, image_id, count, user_data, security_group_names, **kwargs
        )
        if profile:
            for instance in reservation.instances:
                self.associate_iam_instance_profile(
                    instance_id=instance.id,
                    iam_instance_profile_name=profile.get("Name"),
                    iam_instance_profile_arn=profile.get("Arn"),
                )
        return reservation

    InstanceBackend.run_instances = run_instances


def patch_launch_template_network_interface() -> None:
    """(gap) A launch template's NetworkInterfaces are ignored when an instance is launched from it: its
    primary interface's Groups and AssociatePublicIpAddress never reach the instance, which then has no security
    group and no public IP. On AWS the template's interface is the instance's. Ballast's launch templates put the
    cluster's security group (and a group's additionalSecurityGroups) on the primary interface with its public IP
    (associatePublicIp), as EC2 requires when an interface is given.

    We wrap InstanceBackend.run_instances (after patch_launch_template_profile_and_metadata_options, so both
    apply): the template version's interface of DeviceIndex 0 gives the security group ids (unless the call
    named some) and the public IP choice (unless the call made one; the Auto Scaling path passes None).

    Internals: InstanceBackend.run_instances kwargs launch_template / security_group_ids / associate_public_ip /
    nics; EC2Backend._get_template_from_args; Instance.__init__ reading associate_public_ip (None: the subnet's
    MapPublicIpOnLaunch) and prep_nics giving the primary interface a public IP.
    """
    from moto.ec2.models.instances import InstanceBackend

    original = InstanceBackend.run_instances

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("launch_template") and not kwargs.get("nics"):
            data = self._get_template_from_args(kwargs["launch_template"]).data
            primary = next(
                (n for n in data.get("NetworkInterfaces") or [] if int(n.get("DeviceIndex", 0)) == 0),
                None,
            )
            if primary is not None:
                groups = primary.get("Groups") or []
                if groups and not kwargs.get("security_group_ids") and not security_group_names:
                    kwargs["security_group_ids"] = list(groups)
                public = primary.get("AssociatePublicIpAddress")
                if public is not None and kwargs.get("associate_public_ip") is None:
                    kwargs["associate_public_ip"] = str(public).lower() == "true"
        return original(self, image_id, count, user_data, security_group_names, **kwargs)

    InstanceBackend.run_instances = run_instances


def patch_asg_mixed_instances_policy() -> None:
    """(bugs) Auto Scaling groups with a MixedInstancesPolicy, and MaxInstanceLifetime:
    - a group of desired capacity N launched fewer instances (moto splits N into on-demand and spot with
      truncating arithmetic: N=2 at 5% on-demand above base launched 1); AWS launches N (weights aside);
    - its instances ran the launch template's instance type; AWS runs the overrides' types (with the prioritized
      on-demand strategy, the first one), so the first override is used, as moto's own comment intends;
    - UpdateAutoScalingGroup without MixedInstancesPolicy (a resize, as rolling-update sends) dropped the
      policy; AWS keeps what a call does not name (a LaunchTemplate sent does replace it);
    - MaxInstanceLifetime was neither stored nor returned (Create/UpdateAutoScalingGroup,
      DescribeAutoScalingGroups). Stored and returned now; no instance is replaced for its age here.

    Ballast's groups with spec.mixedInstancesPolicy and spec.maxInstanceLifetime are created, resized and rolled
    through these calls, and update cluster compares what DescribeAutoScalingGroups returns with the spec.

    Internals: FakeAutoScalingGroup.{set_desired_capacity, mixed_instances_policy, instance_type (a property)},
    AutoScalingBackend.update_auto_scaling_group / create_auto_scaling_group (keyword arguments),
    AutoScalingResponse._get_param, its create/update_auto_scaling_group; DescribeAutoScalingGroups serializes
    the group's attributes by the output shape's member names (max_instance_lifetime).
    """
    from moto.autoscaling.models import AutoScalingBackend, FakeAutoScalingGroup
    from moto.autoscaling.responses import AutoScalingResponse

    def overrides(group):  # type: ignore[no-untyped-def]
        policy = getattr(group, "_ballast_policy", None) or group.mixed_instances_policy or {}
        return (policy.get("LaunchTemplate") or {}).get("Overrides") or []

    original_capacity = FakeAutoScalingGroup.set_desired_capacity

    def set_desired_capacity(self, new_capacity):  # type: ignore[no-untyped-def]
        unweighted = overrides(self) and not any(o.get("WeightedCapacity") for o in overrides(self))
        if not unweighted:
            return original_capacity(self, new_capacity)
        # Count instances as a group without a policy would (N for N), launching the policy's types.
        self._ballast_policy, self.mixed_instances_policy = self.mixed_instances_policy, None
        try:
            return original_capacity(self, new_capacity)
        finally:
            self.mixed_instances_policy, self._ballast_policy = self._ballast_policy, None

    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity

    template_type = FakeAutoScalingGroup.instance_type

    def instance_type(self):  # type: ignore[no-untyped-def]
        first = next((o.get("InstanceType") for o in overrides(self) if o.get("InstanceType")), None)
        return first or template_type.fget(self)

    FakeAutoScalingGroup.instance_type = property(instance_type)

    original_update = AutoScalingBackend.update_auto_scaling_group

    def update_auto_scaling_group(self, name, *args, **kwargs):  # type: ignore[no-untyped-def]
        group = self.autoscaling_groups.get(name)
        kept = group.mixed_instances_policy if group is not None else None
        names_template = bool(kwargs.get("launch_template") or kwargs.get("launch_config_name"))
        if kwargs.get("mixed_instances_policy") is None and not names_template and kept is not None:
            # Sent again as a request would: moto stores the template's id and name, and refuses both given.
            again = copy.deepcopy(kept)
            spec = again["LaunchTemplate"]["LaunchTemplateSpecification"]
            spec.pop("LaunchTemplateName", None)
            kwargs["mixed_instances_policy"] = again
        return original_update(self, name, *args, **kwargs)

    AutoScalingBackend.update_auto_scaling_group = update_auto_scaling_group

    def with_lifetime(original):  # type: ignore[no-untyped-def]
        def handler(self):  # type: ignore[no-untyped-def]
            result = original(self)
            lifetime = self._get_param("MaxInstanceLifetime")
            group = self.autoscaling_backend.autoscaling_groups.get(self._get_param("AutoScalingGroupName"))
            if group is not None:
                if lifetime is not None:
                    group.max_instance_lifetime = int(lifetime) or None
                elif not hasattr(group, "max_instance_lifetime"):
                    group.max_instance_lifetime = None
            return result

        return handler

    AutoScalingResponse.create_auto_scaling_group = with_lifetime(
        AutoScalingResponse.create_auto_scaling_group
    )
    AutoScalingResponse.update_auto_scaling_group = with_lifetime(
        AutoScalingResponse.update_auto_scaling_group
    )


def patch_trust_policy_principals(ec2_service_user: str | None) -> None:
    """Trust-policy evaluation of sts:AssumeRole under IAM enforcement (moto.iam.access_control).

    moto bugs, all seen in 5.2.5:
    - A statement with a Service principal (no "AWS" key) crashes _check_principal with
      `TypeError: argument of type 'NoneType' is not iterable` -> HTTP 500 for EVERY AssumeRole
      of a role whose trust policy has such a statement, i.e. every kops-style node role
      ({"Service": "ec2.amazonaws.com"}).
    - A statement whose principal does not match the caller yields DENIED instead of "not
      applicable", so in a multi-statement trust policy one statement for someone else denies
      the caller even when another statement allows it. Same for an unmet Condition.
    - Principal {"AWS": "arn:aws:iam::ACCOUNT:root"} (or a bare account id) does not match the
      account's users and roles; on AWS it delegates to the account (the caller's own identity
      policy must then allow sts:AssumeRole, which moto checks separately).

    Ballast needs AssumeRole of its node/master roles to hand each emulated instance real role
    credentials (through its IMDS), so that least privilege is really tested. On AWS the EC2
    service does that as principal ec2.amazonaws.com; in the emulator the IAM user named by
    --ec2-service-user plays that service: it matches {"Service": "ec2.amazonaws.com"}. No other
    caller does, so operator credentials cannot assume node roles (as on AWS).

    Internals: moto.iam.access_control.IAMPolicyStatement (replaced: is_action_permitted, using
    its _statement, is_unknown_principal, _check_element_matches, _check_conditions) and
    PermissionResult; IAMRequestBase passes the caller ARN as `principal` only for trust policies.
    """
    import re

    from moto.iam.access_control import IAMPolicyStatement, PermissionResult

    def as_list(v):  # type: ignore[no-untyped-def]
        return v if isinstance(v, list) else [v]

    def account_of(arn: str) -> str:
        parts = arn.split(":")
        return parts[4] if len(parts) > 4 else ""

    def principal_matches(expected, principal: str) -> bool:  # type: ignore[no-untyped-def]
        if not expected or expected == "*":
            return True
        if not isinstance(expected, dict):
            return False
        for aws in as_list(expected.get("AWS", [])):
            if aws in ("*", principal):
                return True
            if re.fullmatch(r"\d{12}", aws) and account_of(principal) == aws:
                return True
            if aws.endswith(":root") and account_of(aws) == account_of(principal):
                return True
        if ec2_service_user and "ec2.amazonaws.com" in as_list(expected.get("Service", [])):
            if re.fullmatch(r"arn:[^:]+:iam::\d{12}:user/(?:.*/)?" + re.escape(ec2_service_user), principal):
                return True
        return False

    def is_action_permitted(self, action, resource="*", principal=None, incoming_condition_values=None):  # type: ignore[no-untyped-def]
        st = self._statement
        if "NotAction" in st:
            concerned = not self._check_element_matches("NotAction", action)
        else:
            concerned = self._check_element_matches("Action", action)
        if not concerned:
            return PermissionResult.NEUTRAL
        if self.is_unknown_principal(st.get("Principal")):
            return PermissionResult.NEUTRAL
        if principal and not principal_matches(st.get("Principal"), principal):
            return PermissionResult.NEUTRAL  # moto: DENIED (the statement is about someone else)
        if not self._check_conditions(incoming_condition_values):
            return PermissionResult.NEUTRAL  # moto: DENIED (an unmet condition = not applicable)
        if not st.get("Resource"):  # trust policies have no Resource
            return PermissionResult.PERMITTED if st.get("Effect") == "Allow" else PermissionResult.DENIED
        if not self._check_element_matches("Resource", resource):
            return PermissionResult.NEUTRAL
        return PermissionResult.PERMITTED if st.get("Effect") == "Allow" else PermissionResult.DENIED

    IAMPolicyStatement.is_action_permitted = is_action_permitted


def patch_signature_of_form_encoded_bodies() -> None:
    """SigV4 checks of query-protocol requests (EC2, IAM, STS, Auto Scaling, ELBv2) under IAM
    enforcement (moto.iam.access_control.IAMRequestBase.check_signature).

    moto bug (5.2.5, server mode): werkzeug consumes a form-encoded body into request.form, so the
    raw body moto hands to the signature check is empty, and moto re-encodes the parsed form with
    urlencode's quote_plus: a space becomes '+'. That matches what botocore sends, but the Rust SDK
    (like other SDKs) encodes a space as '%20', so every signed request carrying a value with a
    space (a security group's description, say) fails with AuthFailure / SignatureDoesNotMatch.

    Ballast needs IAM enforced (least privilege is proven on the local cloud) and sends such
    values. Fix: when the check fails and there is no raw body, check once more against the form
    re-encoded as RFC 3986 (quote, '%20'), in the order moto parsed it; either encoding is a valid
    body, and the signature proves which one the client sent. Internals: IAMRequestBase._body,
    _data, check_signature.
    """
    from urllib.parse import quote, urlencode

    from moto.iam.access_control import IAMRequestBase

    original = IAMRequestBase.check_signature

    def check_signature(self):  # type: ignore[no-untyped-def]
        try:
            return original(self)
        except Exception:
            if self._body or not isinstance(self._data, dict) or not self._data:
                raise
            first_error = sys.exc_info()[1]
        self._body = urlencode(list(self._data.items()), doseq=True, quote_via=quote).encode()
        try:
            return original(self)
        except Exception:
            raise first_error from None
        finally:
            self._body = b""

    IAMRequestBase.check_signature = check_signature


def patch_resource_tag_conditions_of_volume_attachment() -> None:
    """Identity policies of ec2:AttachVolume / ec2:DetachVolume, and of the cloud controller manager's route
    controller (ec2:CreateRoute / ec2:DeleteRoute on a route table, ec2:ModifyInstanceAttribute on an instance),
    under IAM enforcement (moto.iam.access_control.IAMRequestBase.check_action_permitted).

    moto gap (5.2.5): identity policies are evaluated against Resource "*" for every EC2 action,
    with no condition values at all, so a statement limited by `ec2:ResourceTag/...` (or to
    volume/instance ARNs) never applies: the caller is refused even its own cluster's volumes, and
    a policy without the condition would let it take any volume.

    Ballast's control-plane role may attach and detach only volumes tagged as owned by its own
    cluster, and only to its cluster's control-plane instances (docs/etcd.md, "Volumes"); with kubenet its
    cloud controller manager may route only in its cluster's route tables and turn off the
    source/destination check of its cluster's instances only (docs/addons.md, "kubenet"). Fix: for
    these actions only, evaluate the caller's policies once per resource the call names, as AWS does:
    the volume (arn:aws:ec2:REGION:ACCOUNT:volume/ID) with `ec2:ResourceTag/KEY` and
    `aws:ResourceTag/KEY` set from the volume's tags, the instance and the route table likewise; the
    call is allowed only when every one is (an explicit Deny of any refuses it). moto's own condition check
    cannot be used (a condition on a missing key passes, an unknown operator is ignored), so
    statements are evaluated here: Action/NotAction and Resource by wildcard, Condition with
    StringEquals and StringLike only, a missing key or any other operator not matching (fail closed).
    Internals: IAMRequestBase (_action, _data, _region, account_id, _access_key.collect_policies,
    _raise_access_denied), IAMPolicy._policy_json, ec2_backends[..].tags (a TagBackend dict).
    """
    import fnmatch
    import json

    from moto.ec2.models import ec2_backends
    from moto.iam.access_control import IAMPolicy, IAMRequestBase

    original = IAMRequestBase.check_action_permitted
    # Each action's resources: (ARN resource type, the request parameter naming it).
    attachment = [("volume", "VolumeId"), ("instance", "InstanceId")]
    actions = {
        "ec2:AttachVolume": attachment,
        "ec2:DetachVolume": attachment,
        "ec2:CreateRoute": [("route-table", "RouteTableId")],
        "ec2:DeleteRoute": [("route-table", "RouteTableId")],
        "ec2:ModifyInstanceAttribute": [("instance", "InstanceId")],
    }

    def value(data, key):  # type: ignore[no-untyped-def]
        v = data.get(key) if isinstance(data, dict) else None
        return v[0] if isinstance(v, list) and v else v

    def as_list(v):  # type: ignore[no-untyped-def]
        return v if isinstance(v, list) else [v]

    def matches(patterns, text: str, case: bool) -> bool:  # type: ignore[no-untyped-def]
        if not case:
            text = text.lower()
        return any(fnmatch.fnmatchcase(text, p if case else p.lower()) for p in as_list(patterns))

    # moto's own condition check passes a condition whose key is missing and ignores operators it does
    # not know; this one is strict, as AWS is: a missing key or an unknown operator does not match.
    def conditions_hold(conditions, values) -> bool:  # type: ignore[no-untyped-def]
        for operator, pairs in (conditions or {}).items():
            if operator not in ("StringEquals", "StringLike"):
                return False
            for key, expected in pairs.items():
                if key not in values:
                    return False
                if operator == "StringEquals" and values[key] not in as_list(expected):
                    return False
                if operator == "StringLike" and not matches(expected, values[key], True):
                    return False
        return True

    def statements(policy):  # type: ignore[no-untyped-def]
        document = IAMPolicy(policy)._policy_json
        return as_list(document.get("Statement", []))

    def decision(policies, action: str, arn: str, values) -> str:  # type: ignore[no-untyped-def]
        allowed = False
        for policy in policies:
            for st in statements(policy):
                if "Action" in st and not matches(st["Action"], action, False):
                    continue
                if "NotAction" in st and matches(st["NotAction"], action, False):
                    continue
                if not matches(st.get("Resource", []), arn, True):
                    continue
                if not conditions_hold(st.get("Condition"), values):
                    continue
                if st.get("Effect") == "Deny":
                    return "deny"
                allowed = True
        return "allow" if allowed else "implicit-deny"

    def check_action_permitted(self, resource):  # type: ignore[no-untyped-def]
        if self._action not in actions:
            return original(self, resource)
        backend = ec2_backends[self.account_id][self._region]
        named = [(kind, value(self._data, parameter)) for kind, parameter in actions[self._action]]
        policies = self._access_key.collect_policies()
        for kind, resource_id in named:
            if not resource_id:
                continue
            tags = dict(backend.tags.get(resource_id, {}))
            arn = f"arn:aws:ec2:{self._region}:{self.account_id}:{kind}/{resource_id}"
            values = {}
            for key, val in tags.items():
                values[f"ec2:ResourceTag/{key}"] = val
                values[f"aws:ResourceTag/{key}"] = val
            if decision(policies, self._action, arn, values) != "allow":
                self._raise_access_denied()

    IAMRequestBase.check_action_permitted = check_action_permitted


def patch_policy_variable_userid() -> None:
    """The policy variable `${aws:userid}` in an assumed role's policies (moto.iam.access_control).

    moto gap (5.2.5): policy variables are never substituted; `${aws:userid}` stays literal text (and its `$`
    becomes a regex anchor in moto's resource match), so a statement naming it never applies. On AWS, for a
    role's session it is `<role-id>:<session-name>`, and EC2 names an instance role's session after the
    instance ("IAM identifiers", aws:userid), which is how Ballast lets each node write its own log tail and no
    other (`logs/${aws:userid}.json`, docs/toolbox.md). Fix: the policies an assumed role's access key collects
    are returned with `${aws:userid}` replaced by that session's user id (moto's own AssumedRole.user_id, what
    sts:GetCallerIdentity answers). IAM users' policies are left as they are (no statement Ballast writes for a
    user names the variable; left literal it matches nothing, which fails closed).
    Internals: AssumedRoleAccessKey (_access_key_id, collect_policies), sts_backends[..][..].assumed_roles,
    Policy.versions / is_default / document, get_role_policy's (name, document).
    """
    import json

    from moto.iam.access_control import AssumedRoleAccessKey
    from moto.iam.models import Policy
    from moto.sts.models import sts_backends

    original = AssumedRoleAccessKey.collect_policies
    variable = "${aws:userid}"

    def document_of(policy):  # type: ignore[no-untyped-def]
        if isinstance(policy, Policy):
            return next(v.document for v in policy.versions if v.is_default)
        if isinstance(policy, dict):
            return policy["policy_document"]
        return policy

    def collect_policies(self):  # type: ignore[no-untyped-def]
        policies = original(self)
        user_id = None
        for assumed in sts_backends[self.account_id][self.partition].assumed_roles:
            if assumed.access_key_id == self._access_key_id:
                user_id = assumed.user_id
        if user_id is None:
            return policies
        out = []
        for policy in policies:
            document = document_of(policy)
            if not isinstance(document, str):
                document = json.dumps(document)
            out.append(document.replace(variable, user_id))
        return out

    AssumedRoleAccessKey.collect_policies = collect_policies


# Instance shutdowns: what the instance runner must know and cannot read from moto's state.
# Instance id -> whether its last TerminateInstances/StopInstances asked SkipOsShutdown (a power cut).
POWER_CUTS: dict[str, bool] = {}
POWER_CUTS_LOCK = threading.Lock()


def patch_skip_os_shutdown() -> None:
    """TerminateInstances and StopInstances with SkipOsShutdown (moto.ec2.responses.instances.InstanceResponse).

    moto gap (5.2.5): the parameter is accepted and ignored, and moto's state has no place for it. On EC2 a
    termination or stop shuts the OS down gracefully (systemd stops its units: nodeup gets SIGTERM) unless
    SkipOsShutdown=true, which cuts the power. The local cloud's runner, which does the shutting down, only
    sees the instance's state change. Fix: remember, per instance id, whether its last terminate or stop asked
    to skip the OS shutdown (recorded before moto changes the state, so the runner never sees the new state
    without it; a later call without the flag clears it), served at `GET /_ballast/power-cuts`. Instances
    terminated by Auto Scaling (scale-in, replacement) never pass through here: graceful, as on EC2.
    Internals: InstanceResponse.terminate_instances / stop_instances, BaseResponse._get_param,
    _get_bool_param.
    """
    from moto.ec2.responses.instances import InstanceResponse

    def recording(original):  # type: ignore[no-untyped-def]
        def handler(self):  # type: ignore[no-untyped-def]
            ids = self._get_param("InstanceIds", []) or []
            skip = bool(self._get_bool_param("SkipOsShutdown", False))
            with POWER_CUTS_LOCK:
                for instance_id in ids:
                    if skip:
                        POWER_CUTS[instance_id] = True
                    else:
                        POWER_CUTS.pop(instance_id, None)
            return original(self)

        handler.__name__ = original.__name__
        return handler

    InstanceResponse.terminate_instances = recording(InstanceResponse.terminate_instances)
    InstanceResponse.stop_instances = recording(InstanceResponse.stop_instances)


def power_cuts() -> bytes:
    """`{"instance_ids": [...]}`: the instances whose last terminate or stop skipped the OS shutdown."""
    import json

    with POWER_CUTS_LOCK:
        ids = sorted(POWER_CUTS)
    return json.dumps({"instance_ids": ids}).encode()


# Patches without parameters; patch_trust_policy_principals takes --ec2-service-user.
def patch_bucket_versioning_root_element() -> None:
    """GetBucketVersioning (moto.s3.responses.S3Response.get_bucket_versioning).

    moto bug (5.2.5): the response's root element is `GetBucketVersioningResponse`; S3 answers
    `VersioningConfiguration`. botocore does not check the root's name, the Rust SDK does, and fails
    with an unparsable response ("unknown error"), so Ballast's state-bucket check could not read
    versioning at all. Fix: the same answer under S3's root element. Internals:
    S3Response.get_bucket_versioning, backend.get_bucket_versioning.
    """
    from moto.s3.responses import S3Response

    def get_bucket_versioning(self):  # type: ignore[no-untyped-def]
        status = self.backend.get_bucket_versioning(self.bucket_name)
        inner = f"<Status>{status}</Status>" if status else ""
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"{inner}</VersioningConfiguration>"
        )
        return 200, {"Content-Type": "application/xml"}, body

    S3Response.get_bucket_versioning = get_bucket_versioning


def patch_s3_conditional_writes_atomic() -> None:
    """PutObject and DeleteObject (moto.s3.responses.S3Response.put_object, .delete_object).

    moto race (5.2.5): a conditional write checks `If-Match` / `If-None-Match` against the stored
    object, then writes, with nothing holding the two together, and the server serves requests on
    many threads: two writers racing on the same version can both pass the check and both "win"
    (seen: Ballast's racing-writers test, 2 winners of 8, on a loaded machine). S3 decides a
    conditional write atomically. Fix: every object write and delete runs under one lock, so a check
    and its write are never interleaved with another's. Internals: S3Response.put_object,
    S3Response.delete_object.
    """
    from moto.s3.responses import S3Response

    writes = threading.Lock()

    def serialized(original):  # type: ignore[no-untyped-def]
        def write(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            with writes:
                return original(self, *args, **kwargs)

        return write

    S3Response.put_object = serialized(S3Response.put_object)
    S3Response.delete_object = serialized(S3Response.delete_object)


def patch_s3_expected_bucket_owner() -> None:
    """Every S3 request's `x-amz-expected-bucket-owner` (moto.s3.responses.S3Response._bucket_response,
    ._key_response).

    moto gap (5.2.5): the header (`ExpectedBucketOwner` in the SDKs) is ignored, so a request that names an
    account other than the bucket's owner succeeds; S3 refuses it with 403 AccessDenied. Ballast passes its own
    account on every call to the state and discovery buckets, so that a bucket of that name owned by someone
    else is never read or written. Fix: before either handler runs, a bucket that exists and belongs to another
    account than the header names answers 403 AccessDenied; without the header, or for a bucket that does not
    exist (its handler answers NoSuchBucket, as S3 does), nothing changes. Internals: S3Response.setup_class
    (headers, bucket_name), backend.get_bucket, FakeBucket.account_id, S3AccessDeniedError.
    """
    from moto.s3.exceptions import MissingBucket, S3AccessDeniedError
    from moto.s3.responses import S3Response

    def checked(original):  # type: ignore[no-untyped-def]
        def handler(self, request, full_url):  # type: ignore[no-untyped-def]
            expected = request.headers.get("x-amz-expected-bucket-owner")
            bucket_name = self.parse_bucket_name_from_url(request, full_url)
            if expected is not None and bucket_name:
                try:
                    bucket = self.backend.get_bucket(bucket_name)
                except MissingBucket:
                    bucket = None
                if bucket is not None and bucket.account_id != expected:
                    raise S3AccessDeniedError()
            return original(self, request, full_url)

        return handler

    S3Response._bucket_response = checked(S3Response._bucket_response)
    S3Response._key_response = checked(S3Response._key_response)


def patch_register_image_root_device_name() -> None:
    """RegisterImage (moto.ec2.responses.amis.AmisResponse.register_image).

    moto bug (5.2.5): RootDeviceName is ignored and every registered image reports /dev/sda1, so an
    image registered with /dev/xvda could not be told from one on /dev/sda1 and a launch template
    whose root volume mapping names the wrong device looked right. Fix: the image keeps the
    RootDeviceName sent, and none when none was sent (an image AWS would describe without one).
    Internals: AmisResponse.register_image, ec2_backend.register_image, Ami.root_device_name.
    """
    from moto.core.responses import ActionResult
    from moto.ec2.responses.amis import AmisResponse

    def register_image(self):  # type: ignore[no-untyped-def]
        name = self._get_param("Name")
        description = self._get_param("Description", "")
        root_device_name = self._get_param("RootDeviceName")
        self.error_on_dryrun()
        image = self.ec2_backend.register_image(name, description)
        image.root_device_name = root_device_name
        return ActionResult({"ImageId": image.id})

    AmisResponse.register_image = register_image


# Speed patches: the same answers, without moto's per-request costs that grow with the cloud. Measured with
# py-spy on the emulator during lifecycle-bench (medium size): tag lookups were a fifth of its CPU, backend
# dispatch a tenth, the access log a twelfth.
def patch_tag_lookup_by_resource() -> None:
    """Tags of one EC2 resource (moto.ec2.models.core.TaggedEC2Resource.get_tags).

    moto (5.2.5) answers "the tags of this resource" with DescribeTags over every tag in the region, matching
    a regular expression per tag: every instance serialized and every `tag:` filter checked cost time in
    proportion to the whole cloud's tags, so DescribeInstances grew with the square of the instances (about
    8 ms per instance returned at 100 instances). Fix: read the resource's own entry of the same tag store,
    in the same order and the same shape. Internals: ec2_backend.tags (resource id -> {key: value}),
    EC2_PREFIX_TO_RESOURCE, get_prefix.
    """
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(self):  # type: ignore[no-untyped-def]
        resource_id = getattr(self, "id", None)
        if not resource_id:
            return []
        tags = self.ec2_backend.tags.get(resource_id)
        if not tags:
            return []
        resource_type = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [
            {"resource_id": resource_id, "key": key, "value": value, "resource_type": resource_type}
            for key, value in list(tags.items())
        ]

    TaggedEC2Resource.get_tags = get_tags


def patch_backend_dispatch_cache() -> None:
    """Which service answers a request (moto.moto_server.werkzeug_app.DomainDispatcherApplication).

    moto (5.2.5) lists its own package directory (a listdir and ~150 isdir calls) and then tries a few hundred
    URL patterns for every request, under one lock. The answer depends only on the host name, and moto's
    modules do not change while it runs. Fix: remember the module list once and each host's backend.
    Internals: backends.list_of_moto_modules, DomainDispatcherApplication.get_backend_for_host.
    """
    import threading

    from moto import backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    original = DomainDispatcherApplication.get_backend_for_host
    by_host: dict = {}
    lock = threading.Lock()

    def get_backend_for_host(self, host):  # type: ignore[no-untyped-def]
        with lock:
            if host in by_host:
                return by_host[host]
        backend = original(self, host)
        if backend is not None:  # misses print moto's advice each time, as before
            with lock:
                by_host[host] = backend
        return backend

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host


# The emulator's own address ("http://HOST:PORT"), set once the server listens: the web-identity check reads an
# issuer's discovery documents from the emulator's own S3 over it.
SELF_URL: str | None = None

# What an anonymous (unsigned) read of an object may be: a plain GetObject / HeadObject, no sub-resource.
ANONYMOUS_READ_METHODS = ("GET", "HEAD")


def patch_anonymous_public_object_reads() -> None:
    """Unsigned S3 object reads under IAM enforcement (moto.core.authorization, moto_server.werkzeug_app).

    moto gaps (5.2.5, server mode, IAM enforced):
    - An unsigned request (no Authorization header, no presigned query) reaches the identity check, which
      reads `headers["Authorization"]`: KeyError, HTTP 500, even for an object whose ACL is public-read. On
      AWS an anonymous GET of a public object works, and of any other object gets 403 AccessDenied.
    - An unsigned GET of a path ending in `/.well-known/openid-configuration` is routed to Cognito (moto
      serves user pools' discovery documents there), so an S3 object of that name cannot be read over HTTP
      at all (404), whatever its ACL.

    Ballast publishes a cluster's service-account issuer discovery documents (`<issuer>/.well-known/
    openid-configuration` and the JWKS) as public objects, which AWS STS and anyone else read anonymously;
    the private state store must stay unreadable that way. Fix: an unsigned GET/HEAD of an object, with no
    query string, is allowed when the object is public, as AWS decides it: the bucket policy has an Allow for
    principal "*" on s3:GetObject and the object (a statement with a Condition does not count; a Deny for "*"
    refuses), or the object's ACL grants AllUsers READ; the bucket's public access block is honoured
    (RestrictPublicBuckets ignores the policy, IgnorePublicAcls the ACL). Anything else unsigned gets
    AccessDenied (403). Signed requests are checked as before. A discovery-document path is routed to
    Cognito only when its first segment is a user pool id (`REGION_ID`: an S3 bucket name has no '_').
    Internals: ActionAuthenticatorMixin._authenticate_and_authorize_s3_action (wrapped), request_count,
    settings.INITIAL_NO_AUTH_ACTION_COUNT, S3Response (headers, method, querystring, current_account, backend),
    FakeBucket (policy, public_access_block, keys), FakeKey.acl.public_read,
    DomainDispatcherApplication.get_service_from_unsigned_path (wrapped).
    """
    import fnmatch
    import json
    from urllib.parse import urlsplit

    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError

    original = ActionAuthenticatorMixin._authenticate_and_authorize_s3_action

    def as_list(v):  # type: ignore[no-untyped-def]
        return v if isinstance(v, list) else [v]

    def for_everyone(principal) -> bool:  # type: ignore[no-untyped-def]
        return principal == "*" or (isinstance(principal, dict) and "*" in as_list(principal.get("AWS", [])))

    def policy_decision(bucket, resource: str) -> str:  # type: ignore[no-untyped-def]
        if not bucket.policy:
            return "none"
        try:
            document = json.loads(bucket.policy)
        except ValueError:
            return "none"
        decision = "none"
        for st in as_list(document.get("Statement", [])):
            if not isinstance(st, dict) or not for_everyone(st.get("Principal")):
                continue
            actions = as_list(st.get("Action", []))
            if not any(fnmatch.fnmatchcase("s3:getobject", a.lower()) for a in actions):
                continue
            if not any(fnmatch.fnmatchcase(resource, r) for r in as_list(st.get("Resource", []))):
                continue
            if st.get("Effect") == "Deny":
                return "deny"
            if st.get("Effect") == "Allow" and not st.get("Condition"):
                decision = "allow"
        return decision

    def is_public(response, bucket_name: str, key_name: str) -> bool:  # type: ignore[no-untyped-def]
        bucket = response.backend.buckets.get(bucket_name)
        if bucket is None:
            return False
        key = bucket.keys.get(key_name)
        if key is None:
            return False  # AWS: 403 for a missing key without s3:ListBucket
        block = bucket.public_access_block
        decision = policy_decision(bucket, f"arn:aws:s3:::{bucket_name}/{key_name}")
        if decision == "deny":
            return False
        if decision == "allow" and not (block and block.restrict_public_buckets):
            return True
        return bool(key.acl and key.acl.public_read and not (block and block.ignore_public_acls))

    def _authenticate_and_authorize_s3_action(self, bucket_name=None, key_name=None):  # type: ignore[no-untyped-def]
        enforced = ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT
        # moto's querystring also holds the headers: the URL's own query says whether it is presigned.
        query = urlsplit(self.uri).query
        signed = "Authorization" in self.headers or "Signature=" in query
        if not enforced or signed:
            return original(self, bucket_name=bucket_name, key_name=key_name)
        if (self.method in ANONYMOUS_READ_METHODS and bucket_name and key_name and not query
                and is_public(self, bucket_name, key_name)):
            return None
        if bucket_name:
            raise BucketAccessDeniedError(bucket=bucket_name)
        raise S3AccessDeniedError()

    ActionAuthenticatorMixin._authenticate_and_authorize_s3_action = _authenticate_and_authorize_s3_action

    original_route = DomainDispatcherApplication.get_service_from_unsigned_path

    def get_service_from_unsigned_path(path_info: str):  # type: ignore[no-untyped-def]
        service, region = original_route(path_info)
        if service == "cognito-idp" and "_" not in path_info.strip("/").split("/")[0]:
            return None, None  # not a user pool id: S3 (moto's default for an unsigned request)
        return service, region

    DomainDispatcherApplication.get_service_from_unsigned_path = staticmethod(get_service_from_unsigned_path)


# AWS STS's limits and algorithms for web identities (AssumeRoleWithWebIdentity's API reference; IAM's OIDC
# provider requirements list the signing algorithms).
WEB_IDENTITY_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
WEB_IDENTITY_TOKEN_MAX_CHARS = 20000
# Discovery documents larger than this are refused rather than read whole (a JWKS of a few keys is ~1 KiB).
DISCOVERY_DOCUMENT_MAX_BYTES = 1 << 20
DISCOVERY_FETCH_TIMEOUT_S = 5.0


class WebIdentityRefused(Exception):
    """Why a web identity token was refused, as the AWS error code and message STS answers with."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def local_fetch_url(url: str) -> str | None:
    """Where the emulator reads a URL of an issuer's documents: its own S3 over loopback HTTP.

    The emulator's own address (any path), and S3's AWS names (virtual-hosted `BUCKET.s3[.-]REGION.amazonaws.com`
    and path-style `s3[.-]REGION.amazonaws.com/BUCKET`), which are this emulator's S3 here. Anything else is not
    reachable from the local cloud (no internet): None."""
    import re
    from urllib.parse import urlsplit

    if SELF_URL is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment:
        return None
    own = urlsplit(SELF_URL)
    host = (parts.hostname or "").lower()
    if parts.port == own.port and host in (own.hostname, "127.0.0.1", "localhost"):
        return SELF_URL + parts.path
    virtual = re.fullmatch(r"([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])\.s3(?:[.-][a-z0-9-]+)?\.amazonaws\.com", host)
    if virtual:
        return f"{SELF_URL}/{virtual.group(1)}{parts.path}"
    if re.fullmatch(r"s3(?:[.-][a-z0-9-]+)?\.amazonaws\.com", host):
        return SELF_URL + parts.path
    return None


def fetch_refused() -> WebIdentityRefused:
    """AWS's answer when an issuer's documents cannot be read or are not what they must be."""
    return WebIdentityRefused(
        "InvalidIdentityToken",
        "Couldn't retrieve verification key from your identity provider, please reference "
        "AssumeRoleWithWebIdentity documentation for requirements",
    )


def fetch_public_json(url: str) -> dict:
    """GET a document anonymously, as STS does on AWS; any failure is AWS's "Couldn't retrieve verification key"."""
    import json
    import urllib.error
    import urllib.request

    refused = fetch_refused()
    target = local_fetch_url(url)
    if target is None:
        log.warning("web identity: %s is not reachable from the local cloud (only its own S3 is)", url)
        raise refused
    try:
        with urllib.request.urlopen(target, timeout=DISCOVERY_FETCH_TIMEOUT_S) as response:
            body = response.read(DISCOVERY_DOCUMENT_MAX_BYTES + 1)
    except (urllib.error.URLError, OSError) as e:
        log.warning("web identity: GET %s (for %s) failed: %s", target, url, e)
        raise refused from None
    if len(body) > DISCOVERY_DOCUMENT_MAX_BYTES:
        raise refused
    try:
        document = json.loads(body)
    except ValueError:
        log.warning("web identity: %s is not JSON", url)
        raise refused from None
    if not isinstance(document, dict):
        raise refused
    return document


def verify_web_identity(token: str, providers) -> tuple[dict, object]:  # type: ignore[no-untyped-def]
    """Check a web identity token as STS does; returns its claims and the IAM OIDC provider that vouches for it.

    `providers` are the account's IAM OpenID Connect providers. Order of the checks, each refusal with AWS's
    error: a JWT at all, `iss` names a provider, the issuer's keys (discovery document -> jwks_uri, fetched
    anonymously), the signature by the key the header's `kid` names (RS/ES 256/384/512 only), `exp` and `nbf`,
    then `aud` among the provider's client ids."""
    import json
    import time

    from joserfc import jwt
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet
    from joserfc.jws import extract_compact

    def invalid(message: str) -> WebIdentityRefused:
        return WebIdentityRefused("InvalidIdentityToken", message)

    if not token or len(token) > WEB_IDENTITY_TOKEN_MAX_CHARS:
        raise invalid("The web identity token is empty or longer than 20000 characters")
    try:
        compact = extract_compact(token.encode())
        header = compact.headers()
        unverified = json.loads(compact.payload)
    except (JoseError, ValueError, TypeError):
        raise invalid("The ID Token provided is not a valid JWT. (You may see this error if you sent an Access Token)") from None
    if not isinstance(unverified, dict) or not isinstance(unverified.get("iss"), str):
        raise invalid("The ID Token provided is not a valid JWT: no issuer (iss)")
    issuer = unverified["iss"]
    provider_url = issuer.split("://", 1)[1] if "://" in issuer else issuer
    provider = next((p for p in providers if p.url == provider_url), None)
    if provider is None:
        raise invalid(f"No OpenIDConnect provider found in your account for {issuer}")
    alg = header.get("alg")
    if alg not in WEB_IDENTITY_ALGORITHMS:
        raise invalid(f"The ID Token's signing algorithm {alg!r} is not supported")

    discovery = fetch_public_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if discovery.get("issuer") != issuer or not isinstance(discovery.get("jwks_uri"), str):
        log.warning("web identity: the discovery document of %s names issuer %r, jwks_uri %r",
                    issuer, discovery.get("issuer"), discovery.get("jwks_uri"))
        raise fetch_refused()
    jwks = fetch_public_json(discovery["jwks_uri"])
    try:
        key_set = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError):
        log.warning("web identity: the JWKS of %s is not a valid key set", issuer)
        raise fetch_refused() from None
    kid = header.get("kid")
    candidates = [k for k in key_set.keys if k.kid == kid] if kid else list(key_set.keys)
    if len(candidates) != 1:
        raise invalid(f"No key in the issuer's JWKS for the token's key id {kid!r}" if kid else
                      "The token names no key id (kid) and the issuer's JWKS holds more than one key")
    try:
        claims = jwt.decode(token, candidates[0], algorithms=[alg]).claims
    except (JoseError, ValueError, TypeError):
        raise invalid("The signature of the ID Token could not be verified with the issuer's keys") from None

    now = time.time()
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if not isinstance(exp, (int, float)):
        raise invalid("The ID Token has no expiration time (exp)")
    if exp <= now:
        raise WebIdentityRefused(
            "ExpiredTokenException",
            f"Token expired: current date/time {int(now)} must be before the expiration date/time {int(exp)}")
    if nbf is not None and (not isinstance(nbf, (int, float)) or nbf > now):
        raise invalid(f"The ID Token is not valid yet (nbf {nbf}, now {int(now)})")
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences
    if not isinstance(audiences, list) or not any(a in provider.client_id_list for a in audiences):
        raise invalid("Incorrect token audience")
    return claims, provider


def web_identity_trust_decision(trust_policy: dict, provider_arn: str, values: dict[str, str]) -> bool:
    """Does a role's trust policy let this web identity assume it? AWS's evaluation, for the one action.

    A statement applies when its Action (or NotAction) covers sts:AssumeRoleWithWebIdentity, its Principal is
    "*" or {"Federated": <the provider's ARN>} (or a list holding it), and every Condition holds. Conditions:
    StringEquals, StringNotEquals, StringLike, StringNotLike (and their IfExists forms) over the condition keys
    of the token (`<provider url>:sub`, `:aud`, `aws:FederatedProvider`); a key the request lacks fails a
    condition (passes an IfExists one); any other operator fails closed: an Allow with it does not apply, a
    Deny with it does. An applicable Deny refuses; else one applicable Allow is needed."""
    import fnmatch

    def as_list(v):  # type: ignore[no-untyped-def]
        return v if isinstance(v, list) else [v]

    def action_covered(st: dict) -> bool:
        action = "sts:assumerolewithwebidentity"
        if "NotAction" in st:
            return not any(fnmatch.fnmatchcase(action, a.lower()) for a in as_list(st["NotAction"]))
        return any(fnmatch.fnmatchcase(action, a.lower()) for a in as_list(st.get("Action", [])))

    def principal_covered(principal) -> bool:  # type: ignore[no-untyped-def]
        if principal == "*":
            return True
        return isinstance(principal, dict) and provider_arn in as_list(principal.get("Federated", []))

    def condition_holds(operator: str, key: str, expected) -> bool | None:  # type: ignore[no-untyped-def]
        base, if_exists = (operator[:-8], True) if operator.endswith("IfExists") else (operator, False)
        if base not in ("StringEquals", "StringNotEquals", "StringLike", "StringNotLike"):
            return None
        if key not in values:
            return if_exists
        value, patterns = values[key], [str(e) for e in as_list(expected)]
        if base == "StringEquals":
            return value in patterns
        if base == "StringNotEquals":
            return value not in patterns
        matched = any(fnmatch.fnmatchcase(value, p) for p in patterns)
        return matched if base == "StringLike" else not matched

    allowed = False
    for st in as_list(trust_policy.get("Statement", [])):
        if not isinstance(st, dict) or not action_covered(st) or not principal_covered(st.get("Principal")):
            continue
        deny = st.get("Effect") == "Deny"
        applies = True
        for operator, pairs in (st.get("Condition") or {}).items():
            for key, expected in (pairs or {}).items():
                held = condition_holds(operator, key, expected)
                if held is None:
                    held = deny  # unknown operator: fail closed
                applies = applies and held
        if applies and deny:
            return False
        if applies and st.get("Effect") == "Allow":
            allowed = True
    return allowed


def patch_assume_role_with_web_identity() -> None:
    """sts:AssumeRoleWithWebIdentity (moto.sts.responses.TokenResponse).

    moto gaps (5.2.5): the token is never read: any string, even empty, returns credentials for any role
    ARN, existing or not, whatever its trust policy. Under IAM enforcement the call (which AWS SDKs send
    unsigned, as AWS expects) fails with HTTP 500 (the identity check reads a missing Authorization header).

    Ballast's IAM roles for service accounts are assumed this way (docs/irsa.md): a pod's projected
    service-account token, signed by the cluster's service-account key, is exchanged for its role's
    credentials. Without the checks the local cloud would prove nothing about the trust policies or the
    published keys. Fix, as AWS does it: the call is unauthenticated (not counted among the initial no-auth
    requests); the token is verified by verify_web_identity (the issuer's documents read anonymously over
    HTTP from the emulator's own S3, see local_fetch_url: so they must really be public); the role must exist
    and its trust policy must allow the identity (web_identity_trust_decision, with `<provider url>:sub`,
    `:aud` (the token's audience that is a client id of the provider) and `aws:FederatedProvider`);
    DurationSeconds within 900 and the role's MaxSessionDuration. The credentials are moto's assumed-role
    credentials (AssumeRole's), so IAM enforcement holds them to the role's policies. The answer carries
    SubjectFromWebIdentityToken, Audience, Provider and the role's own AssumedRoleId. Refusals:
    InvalidIdentityToken and ExpiredTokenException (400) for the token, AccessDenied (403) for the trust policy
    or a missing role, ValidationError for the duration. Not checked (only AWS does): the issuer's TLS
    certificate and the provider's thumbprints (the local cloud serves plain HTTP), and the JWKS is read on
    every call (AWS caches it).
    Internals: TokenResponse.assume_role_with_web_identity (replaced) and _authenticate_and_authorize_normal_action
    (wrapped); STSBackend.assume_role, AssumedRole (user_id, arn, session_name); iam_backends[..].open_id_providers,
    get_role_by_arn, Role.assume_role_policy_document / max_session_duration; OpenIDConnectProvider (url, arn,
    client_id_list); core.exceptions._RESTError; sts.exceptions.STSClientError.
    """
    import json
    import re

    from moto.core.exceptions import _RESTError
    from moto.core.responses import ActionResult
    from moto.iam.models import iam_backends
    from moto.sts.exceptions import STSClientError, STSValidationError
    from moto.sts.responses import TokenResponse
    from moto.utilities.utils import get_partition

    class NotAuthorized(_RESTError):
        """403 AccessDenied in STS's own error shape (one <Error> under <ErrorResponse>): moto's generic
        <Errors><Error> wrapper is read by botocore but not by the Rust SDK, which then sees no error code."""

        code = 403

        def __init__(self) -> None:
            message = "Not authorized to perform sts:AssumeRoleWithWebIdentity"
            super().__init__("AccessDenied", message)
            self.description = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                f"<Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{message}</Message></Error>"
                "</ErrorResponse>"
            )

    original_auth = TokenResponse._authenticate_and_authorize_normal_action

    def _authenticate_and_authorize_normal_action(self, resource="*"):  # type: ignore[no-untyped-def]
        if self._get_action() == "AssumeRoleWithWebIdentity":
            return None  # AWS: an unsigned call; the token is the credential
        return original_auth(self, resource)

    def assume_role_with_web_identity(self):  # type: ignore[no-untyped-def]
        role_arn = self._get_param("RoleArn") or ""
        session_name = self._get_param("RoleSessionName") or ""
        token = self._get_param("WebIdentityToken") or ""
        duration = self._get_int_param("DurationSeconds", 3600)
        if self._get_param("Policy") or self._get_param("PolicyArns"):
            # moto would record a session policy and enforce nothing of it: refuse rather than hand out
            # credentials broader than AWS would.
            raise STSValidationError("Session policies (Policy, PolicyArns) are not emulated by the local cloud")
        if not re.fullmatch(r"[\w+=,.@-]{2,64}", session_name):
            raise STSValidationError(f"1 validation error detected: Value '{session_name}' at 'roleSessionName' "
                                     "failed to satisfy constraint: Member must satisfy regular expression "
                                     "pattern: [\\w+=,.@-]* and have length between 2 and 64")
        arn = re.fullmatch(r"arn:aws:iam::(\d{12}):role/(?:.*/)?[\w+=,.@-]+", role_arn)
        if not arn:
            raise STSValidationError(f"{role_arn} is invalid")
        backend = iam_backends[arn.group(1)][get_partition(self.region)]
        try:
            claims, provider = verify_web_identity(token, list(backend.open_id_providers.values()))
        except WebIdentityRefused as refused:
            log.info("AssumeRoleWithWebIdentity of %s refused: %s %s", role_arn, refused.code, refused.message)
            raise STSClientError(refused.code, refused.message) from None
        try:
            role = backend.get_role_by_arn(role_arn)
        except Exception:
            raise NotAuthorized() from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        audience = next(a for a in audiences if a in provider.client_id_list)
        subject = claims.get("sub")
        values = {"aws:FederatedProvider": provider.arn, f"{provider.url}:aud": audience}
        if isinstance(subject, str):
            values[f"{provider.url}:sub"] = subject
        try:
            trust = json.loads(role.assume_role_policy_document)
        except (TypeError, ValueError):
            trust = {}
        if not web_identity_trust_decision(trust, provider.arn, values):
            log.info("AssumeRoleWithWebIdentity of %s refused by its trust policy: %s", role_arn, values)
            raise NotAuthorized()
        max_duration = int(role.max_session_duration or 3600)
        if not 900 <= duration <= max_duration:
            raise STSValidationError(f"The requested DurationSeconds exceeds the MaxSessionDuration set for this "
                                     f"role (or is below 900): {duration}, allowed 900..{max_duration}")
        assumed = self.backend.assume_role(
            region_name=self.region,
            role_session_name=session_name,
            role_arn=role.arn,
            policy=None,
            duration=duration,
            external_id=None,
        )
        return ActionResult({
            "Credentials": assumed,
            "SubjectFromWebIdentityToken": subject,
            "AssumedRoleUser": {"AssumedRoleId": assumed.user_id, "Arn": assumed.arn},
            "PackedPolicySize": 0,
            "Provider": provider.arn,
            "Audience": audience,
        })

    TokenResponse._authenticate_and_authorize_normal_action = _authenticate_and_authorize_normal_action
    TokenResponse.assume_role_with_web_identity = assume_role_with_web_identity


# Terminating lifecycle hooks (issue 32). moto 5.2.5 stores lifecycle hooks and never uses them: every
# termination is immediate, there is no Terminating:Wait state, and CompleteLifecycleAction and
# RecordLifecycleActionHeartbeat are not implemented (an unknown action). The two patches below share this state.
TERMINATING_TRANSITION = "autoscaling:EC2_INSTANCE_TERMINATING"
# AWS's longest wait for one lifecycle action whatever the heartbeats: 100 heartbeat timeouts or 48 hours.
LIFECYCLE_GLOBAL_TIMEOUT_S = 172800
LIFECYCLE_LOCK = threading.RLock()
# token -> the action: {"token", "instance_id", "group", "hook", "transition", "heartbeat_s", "default_result",
# "deadline", "global_deadline", "detach_tag", "backend"} (deadlines in time.monotonic()).
LIFECYCLE_ACTIONS: dict[str, dict] = {}
DEFER_TERMINATIONS = threading.local()
LIFECYCLE_SWEEP_S = 0.2


def terminating_hooks(backend, group_name: str) -> list:  # type: ignore[no-untyped-def]
    return sorted(
        (h for h in backend.lifecycle_hooks.values()
         if h.auto_scaling_group_name == group_name and h.lifecycle_transition == TERMINATING_TRANSITION),
        key=lambda h: h.name,
    )


def hold_for_lifecycle_hooks(backend, group, state, detach_tag: bool) -> bool:  # type: ignore[no-untyped-def]
    """Put `state` (an InstanceState of `group`) into Terminating:Wait with one pending action per terminating
    hook of the group; False (nothing done) when the group has no such hook. The EC2 instance keeps running."""
    import time
    import uuid

    if getattr(group, "_ballast_deleting", False):
        return False
    hooks = terminating_hooks(backend, group.name)
    if not hooks:
        return False
    now = time.monotonic()
    with LIFECYCLE_LOCK:
        state.lifecycle_state = "Terminating:Wait"
        for hook in hooks:
            heartbeat = int(hook.heartbeat_timeout)
            token = str(uuid.uuid4())
            LIFECYCLE_ACTIONS[token] = {
                "token": token,
                "instance_id": state.instance.id,
                "group": group.name,
                "hook": hook.name,
                "transition": hook.lifecycle_transition,
                "heartbeat_s": heartbeat,
                "default_result": hook.default_result,
                "deadline": now + heartbeat,
                "global_deadline": now + min(100 * heartbeat, LIFECYCLE_GLOBAL_TIMEOUT_S),
                "detach_tag": detach_tag,
                "backend": backend,
            }
    log.info("%s of %s: Terminating:Wait (%s)", state.instance.id, group.name, ", ".join(h.name for h in hooks))
    return True


def finish_lifecycle_action(action: dict, result: str) -> None:
    """Resolve one action (CONTINUE or ABANDON). Once none of the instance's actions is left (ABANDON ends them
    all, as on AWS), the instance leaves its group and is terminated as moto terminates it without hooks."""
    from moto.autoscaling.models import ASG_NAME_TAG

    backend, instance_id = action["backend"], action["instance_id"]
    with LIFECYCLE_LOCK:
        LIFECYCLE_ACTIONS.pop(action["token"], None)
        mine = [t for t, a in LIFECYCLE_ACTIONS.items() if a["instance_id"] == instance_id]
        if result == "ABANDON":
            for token in mine:
                LIFECYCLE_ACTIONS.pop(token, None)
        elif mine:
            return
        group = backend.autoscaling_groups.get(action["group"])
        if group is not None:
            group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
        if action["detach_tag"] and group is not None:
            # What moto's TerminateInstanceInAutoScalingGroup does without hooks (it detaches first).
            backend.ec2_backend.delete_tags([instance_id], {ASG_NAME_TAG: group.name})
        try:
            backend.ec2_backend.terminate_instances([instance_id])
        except Exception as e:  # an instance already gone (terminated through EC2 meanwhile) is done
            log.info("%s: terminate after its lifecycle action: %s", instance_id, e)
    log.info("%s: lifecycle action %s (%s): terminated", instance_id, result, action["hook"])


def patch_asg_terminating_lifecycle_wait() -> None:
    """(gap) Auto Scaling's terminations ignored the group's lifecycle hooks (moto 5.2.5 stores hooks, never
    uses them): an instance was terminated at once. On AWS an instance leaving a group with an
    `autoscaling:EC2_INSTANCE_TERMINATING` hook waits in `Terminating:Wait` (still running) until every hook's
    action is completed or its heartbeat runs out. Now TerminateInstanceInAutoScalingGroup and scale-in
    (SetDesiredCapacity, UpdateAutoScalingGroup, and everything else that goes through set_desired_capacity) do
    the same: the instance's InstanceState stays in the group as `Terminating:Wait` (not counted as capacity,
    so without a decrement its replacement launches at once, as on AWS), one action per hook is recorded, and
    the EC2 instance keeps running. DeleteAutoScalingGroup (moto's is always a force delete) drops the group's
    pending actions and terminates at once, as AWS's ForceDelete does. A group without a terminating hook is
    unchanged. moto has no instance refresh, so there is none to hold. Each TerminateInstanceInAutoScalingGroup runs
    alone (under LIFECYCLE_LOCK), one atomic change to its group as on AWS: moto's threaded server let concurrent
    ones read the capacity and the instances in service before another changed them (a decrement lost, an
    instance scaled in or a replacement launched twice).

    Ballast's `ballast-termination` hook (spec.terminationHandling) and the handler that completes its actions
    are tested against this, and rolling-update completes the action of each instance it drained.

    Internals: AutoScalingBackend.{terminate_instance, delete_auto_scaling_group, lifecycle_hooks,
    autoscaling_groups, ec2_backend}, LifecycleHook.{auto_scaling_group_name, lifecycle_transition,
    heartbeat_timeout, default_result, name}, FakeAutoScalingGroup.{set_desired_capacity (removes the states of
    the instances it passes to ec2_backend.terminate_instances), instance_states, desired_capacity,
    autoscaling_backend}, InstanceState.lifecycle_state, InstanceBackend.terminate_instances,
    TerminateInstanceActivity.
    """
    from moto.autoscaling.models import AutoScalingBackend, FakeAutoScalingGroup, TerminateInstanceActivity
    from moto.ec2.models.instances import InstanceBackend

    original_ec2_terminate = InstanceBackend.terminate_instances

    def terminate_instances(self, instance_ids):  # type: ignore[no-untyped-def]
        deferred = getattr(DEFER_TERMINATIONS, "ids", None)
        if deferred is not None:
            # A scale-in of a group with a terminating hook: held below instead of terminated.
            deferred.extend(instance_ids)
            return []
        return original_ec2_terminate(self, instance_ids)

    InstanceBackend.terminate_instances = terminate_instances

    original_capacity = FakeAutoScalingGroup.set_desired_capacity

    def set_desired_capacity(self, new_capacity):  # type: ignore[no-untyped-def]
        backend = self.autoscaling_backend
        if getattr(self, "_ballast_deleting", False) or not terminating_hooks(backend, self.name):
            return original_capacity(self, new_capacity)
        waiting = [s for s in self.instance_states if s.lifecycle_state.startswith("Terminating")]
        # Instances already waiting are no candidates for another scale-in.
        self.instance_states = [s for s in self.instance_states if s not in waiting]
        before = {s.instance.id: s for s in self.instance_states}
        DEFER_TERMINATIONS.ids = []
        try:
            original_capacity(self, new_capacity)
            chosen = list(DEFER_TERMINATIONS.ids)
        finally:
            DEFER_TERMINATIONS.ids = None
            self.instance_states = self.instance_states + waiting
        for instance_id in chosen:
            state = before.get(instance_id)
            if state is None:
                continue
            self.instance_states.append(state)
            hold_for_lifecycle_hooks(backend, self, state, detach_tag=False)

    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity

    original_terminate = AutoScalingBackend.terminate_instance

    def terminate_instance(self, instance_id, should_decrement):  # type: ignore[no-untyped-def]
        # One termination at a time, as on AWS, where each TerminateInstanceInAutoScalingGroup is one atomic change
        # to its group: moto's server is threaded, and two at once (a roll terminates a batch concurrently) each read
        # the desired capacity and the instances in service before the other changed them, so a decrement was lost
        # or a replacement launched twice.
        with LIFECYCLE_LOCK:
            return terminate_instance_alone(self, instance_id, should_decrement)

    def terminate_instance_alone(self, instance_id, should_decrement):  # type: ignore[no-untyped-def]
        state = next(
            (s for g in self.autoscaling_groups.values() for s in g.instance_states if s.instance.id == instance_id),
            None,
        )
        if state is None:
            return original_terminate(self, instance_id, should_decrement)
        group = state.instance.autoscaling_group
        if not terminating_hooks(self, group.name):
            return original_terminate(self, instance_id, should_decrement)
        original_size = group.desired_capacity
        if state.lifecycle_state.startswith("Terminating"):
            # Already leaving: asked again (a retried call) changes nothing.
            return TerminateInstanceActivity(state.instance, original_size)
        if should_decrement:
            group.desired_capacity = original_size - 1
        hold_for_lifecycle_hooks(self, group, state, detach_tag=True)
        # Launches the replacement when the capacity was not decremented (the waiting one is not InService).
        group.set_desired_capacity(group.desired_capacity)
        return TerminateInstanceActivity(state.instance, original_size)

    AutoScalingBackend.terminate_instance = terminate_instance

    original_delete = AutoScalingBackend.delete_auto_scaling_group

    def delete_auto_scaling_group(self, group_name):  # type: ignore[no-untyped-def]
        group = self.autoscaling_groups.get(group_name)
        if group is None:
            return original_delete(self, group_name)
        with LIFECYCLE_LOCK:
            for token, action in list(LIFECYCLE_ACTIONS.items()):
                if action["group"] == group_name and action["backend"] is self:
                    LIFECYCLE_ACTIONS.pop(token, None)
        group._ballast_deleting = True
        try:
            return original_delete(self, group_name)
        finally:
            group._ballast_deleting = False

    AutoScalingBackend.delete_auto_scaling_group = delete_auto_scaling_group


def patch_lifecycle_action_completion() -> None:
    """(gap) CompleteLifecycleAction and RecordLifecycleActionHeartbeat are not implemented in moto 5.2.5, and
    a hook's heartbeat timeout never ran out. Now, for the actions patch_asg_terminating_lifecycle_wait records:
    CompleteLifecycleAction (AutoScalingGroupName, LifecycleHookName, LifecycleActionResult CONTINUE or ABANDON,
    and LifecycleActionToken or InstanceId) resolves the action; RecordLifecycleActionHeartbeat restarts its
    heartbeat (never past its global timeout: 100 heartbeats or 48 hours); an action whose heartbeat runs out
    gets its hook's DefaultResult (a thread looks every 0.2 s). Either result terminates a terminating
    instance once its last action is resolved (ABANDON resolves all of them). An action not found is AWS's
    ValidationError ("No active Lifecycle Action found with ..."); a bad result value names
    LifecycleActionResult. `GET /_ballast/lifecycle-actions` (not an AWS API) lists the pending actions with
    their tokens, so a test can put the event EventBridge would deliver into a queue.

    Internals: AutoScalingResponse.{_get_param, autoscaling_backend} (moto dispatches an action to the method of
    its snake_case name), moto.core.responses.EmptyResult, moto.autoscaling.exceptions.ValidationError.
    """
    import time

    from moto.autoscaling.exceptions import ValidationError
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.core.responses import EmptyResult

    def find_action(self) -> dict:  # type: ignore[no-untyped-def]
        group = self._get_param("AutoScalingGroupName")
        hook = self._get_param("LifecycleHookName")
        token = self._get_param("LifecycleActionToken")
        instance_id = self._get_param("InstanceId")
        if not group:
            raise ValidationError("AutoScalingGroupName is required")
        if not hook:
            raise ValidationError("LifecycleHookName is required")
        if not token and not instance_id:
            raise ValidationError("Either LifecycleActionToken or InstanceId is required")
        with LIFECYCLE_LOCK:
            for action in LIFECYCLE_ACTIONS.values():
                if (action["backend"] is self.autoscaling_backend and action["group"] == group
                        and action["hook"] == hook
                        and (action["token"] == token if token else action["instance_id"] == instance_id)):
                    return action
        which = f"token {token}" if token else f"instance ID {instance_id}"
        raise ValidationError(f"No active Lifecycle Action found with {which}")

    def complete_lifecycle_action(self):  # type: ignore[no-untyped-def]
        result = self._get_param("LifecycleActionResult")
        if result not in ("CONTINUE", "ABANDON"):
            raise ValidationError(f"LifecycleActionResult must be CONTINUE or ABANDON, not {result!r}")
        finish_lifecycle_action(find_action(self), result)
        return EmptyResult()

    def record_lifecycle_action_heartbeat(self):  # type: ignore[no-untyped-def]
        action = find_action(self)
        with LIFECYCLE_LOCK:
            action["deadline"] = min(time.monotonic() + action["heartbeat_s"], action["global_deadline"])
        return EmptyResult()

    AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
    AutoScalingResponse.record_lifecycle_action_heartbeat = record_lifecycle_action_heartbeat

    def sweep() -> None:
        while True:
            time.sleep(LIFECYCLE_SWEEP_S)
            now = time.monotonic()
            with LIFECYCLE_LOCK:
                due = [a for a in LIFECYCLE_ACTIONS.values() if now >= min(a["deadline"], a["global_deadline"])]
            for action in due:
                try:
                    log.info("%s: heartbeat of %s ran out: %s", action["instance_id"], action["hook"],
                             action["default_result"])
                    finish_lifecycle_action(action, action["default_result"])
                    note_change("autoscaling:LifecycleHeartbeatTimeout")
                except Exception:  # one bad action must not stop the others' timeouts
                    log.exception("lifecycle timeout of %s", action["instance_id"])

    threading.Thread(target=sweep, name="lifecycle-timeouts", daemon=True).start()


def patch_autoscaling_group_resource_for_iam() -> None:
    """(gap) Under IAM enforcement moto authorizes every Auto Scaling call against the resource `*`: a statement
    naming a group's ARN (AWS's resource-level permissions) never applied, so a role held to its cluster's groups
    was denied. Now a call naming an existing group (AutoScalingGroupName) is authorized against that group's
    ARN, as AWS does; a call naming none (the Describe calls, TerminateInstanceInAutoScalingGroup) stays `*`.
    Statements whose Resource is `*` match either way.

    The control-plane role may complete and heartbeat lifecycle actions of its cluster's groups only
    (`ctl/src/cloud/termination_iam.rs`); the termination handler calls them with that role on the local cloud.

    Internals: BaseResponse.call_action asks `self._determine_resource()` when the response class has one;
    AutoScalingResponse.{_get_param, autoscaling_backend}, FakeAutoScalingGroup.arn.
    """
    from moto.autoscaling.responses import AutoScalingResponse

    def _determine_resource(self) -> str:  # type: ignore[no-untyped-def]
        try:
            name = self._get_param("AutoScalingGroupName")
            group = self.autoscaling_backend.autoscaling_groups.get(name) if name else None
            return group.arn if group is not None else "*"
        except Exception:  # authorization must not fail on a request moto itself would refuse
            return "*"

    AutoScalingResponse._determine_resource = _determine_resource


def patch_sqs_get_queue_url_resource() -> None:
    """(gap) Under IAM enforcement moto authorizes SQS calls against the queue the QueueUrl parameter names, and
    GetQueueUrl has none (it names the queue by QueueName): it was authorized against `*`, so a role allowed
    sqs:GetQueueUrl on its own queue's ARN only was denied. Now GetQueueUrl is authorized against the ARN of
    the queue QueueName names (when it exists), as AWS does.

    The control-plane role finds its cluster's termination queue by name (`ctl/src/cloud/termination_iam.rs`).

    Internals: SQSResponse._determine_resource (wrapped), _get_action, _get_param, sqs_backend.get_queue,
    Queue.queue_arn, QueueDoesNotExist.
    """
    from moto.sqs.exceptions import QueueDoesNotExist
    from moto.sqs.responses import SQSResponse

    original = SQSResponse._determine_resource

    def _determine_resource(self) -> str:  # type: ignore[no-untyped-def]
        try:
            if self._get_action() == "GetQueueUrl":
                name = self._get_param("QueueName")
                if name:
                    return self.sqs_backend.get_queue(name).queue_arn
        except (QueueDoesNotExist, AttributeError, TypeError, KeyError):
            pass
        return original(self)

    SQSResponse._determine_resource = _determine_resource


def lifecycle_actions() -> bytes:
    """`{"actions": [...]}`: the pending lifecycle actions, each with its instance, group, hook, transition, token
    and the seconds left of its heartbeat."""
    import json
    import time

    now = time.monotonic()
    with LIFECYCLE_LOCK:
        actions = [
            {
                "instance_id": a["instance_id"],
                "auto_scaling_group_name": a["group"],
                "lifecycle_hook_name": a["hook"],
                "lifecycle_transition": a["transition"],
                "lifecycle_action_token": a["token"],
                "heartbeat_seconds_left": round(min(a["deadline"], a["global_deadline"]) - now, 1),
            }
            for a in LIFECYCLE_ACTIONS.values()
        ]
    actions.sort(key=lambda a: (a["auto_scaling_group_name"], a["instance_id"], a["lifecycle_hook_name"]))
    return json.dumps({"actions": actions}).encode()


PATCHES = [
    patch_signature_of_form_encoded_bodies,
    patch_launch_template_version_user_data_and_source_version,
    patch_asg_az_balanced_launch,
    patch_asg_az_balanced_scale_in,
    patch_asg_instance_reports_its_version,
    patch_launch_template_profile_and_metadata_options,
    patch_launch_template_network_interface,
    patch_asg_mixed_instances_policy,
    patch_resource_tag_conditions_of_volume_attachment,
    patch_policy_variable_userid,
    patch_bucket_versioning_root_element,
    patch_s3_conditional_writes_atomic,
    patch_s3_expected_bucket_owner,
    patch_register_image_root_device_name,
    patch_tag_lookup_by_resource,
    patch_backend_dispatch_cache,
    patch_skip_os_shutdown,
    patch_anonymous_public_object_reads,
    patch_assume_role_with_web_identity,
    # After the scale-in and mixed-instances wrappers of set_desired_capacity: this one holds what they choose.
    patch_asg_terminating_lifecycle_wait,
    patch_lifecycle_action_completion,
    patch_autoscaling_group_resource_for_iam,
    patch_sqs_get_queue_url_resource,
]


def apply_patches(args: argparse.Namespace) -> None:
    import moto

    if moto.__version__ != PINNED_MOTO_VERSION:
        raise SystemExit(
            f"launcher.py: moto {moto.__version__} installed, but the patches are written for "
            f"moto {PINNED_MOTO_VERSION} internals; install requirements.lock"
        )
    for patch in PATCHES:
        patch()
        log.info("applied %s", patch.__name__)
    patch_trust_policy_principals(args.ec2_service_user)
    log.info("applied patch_trust_policy_principals (ec2 service user: %s)", args.ec2_service_user)


STATS_PATH = "/_ballast/stats"
FINGERPRINT_PATH = "/_ballast/instances-fingerprint"
POWER_CUTS_PATH = "/_ballast/power-cuts"
ATTACHMENTS_PATH = "/_ballast/volume-attachments"
LIFECYCLE_ACTIONS_PATH = "/_ballast/lifecycle-actions"


def ec2_region_backends():  # type: ignore[no-untyped-def]
    """Every EC2 backend that exists, account by account, region by region. Only regions that exist already:
    reading a missing one through moto's backend dict would create it."""
    from moto.ec2.models import ec2_backends

    for account_id in list(ec2_backends.keys()):
        regions = ec2_backends[account_id]
        for region in sorted(dict.keys(regions)):
            yield dict.__getitem__(regions, region)


def volume_attachment(volume) -> tuple[str | None, str | None, str | None]:  # type: ignore[no-untyped-def]
    """A volume's attachment as (instance id, device, status); all None when it has none."""
    attachment = volume.attachment
    return (
        getattr(getattr(attachment, "instance", None), "id", None),
        getattr(attachment, "device", None),
        getattr(attachment, "status", None),
    )


def instances_fingerprint() -> str:
    """Digests of what the instance runner acts on, one line each: `all <digest>` of every line after it,
    `volumes <digest>` for every volume's attachment, then `<instance-id> <digest>` per instance for its state,
    tags, instance profile and profile association.

    moto serializes DescribeInstances at about 8 ms per instance (its generic serializer), so at a hundred
    instances the runner's polling alone kept the emulator busy, and at two hundred one full describe took 1.6 s.
    The runner asks for these digests instead (a few milliseconds) and describes only the instances whose digest
    changed. Not an AWS API.
    """
    import hashlib

    volumes = hashlib.sha256()
    lines = []
    for backend in ec2_region_backends():
        associations: dict = {}
        for key, a in list(backend.iam_instance_profile_associations.items()):
            instance_id = getattr(getattr(a, "instance", None), "id", "")
            associations.setdefault(instance_id, []).append((key, repr(getattr(a, "iam_instance_profile", ""))))
        for reservation in list(backend.reservations.values()):
            for instance in list(reservation.instances):
                tags = sorted(backend.tags.get(instance.id, {}).items())
                digest = hashlib.sha256(
                    repr(
                        (
                            instance._state.name,
                            tags,
                            repr(instance.iam_instance_profile),
                            sorted(associations.get(instance.id, [])),
                        )
                    ).encode()
                ).hexdigest()[:32]
                lines.append(f"{instance.id} {digest}")
        # Volume attachments too: the runner mounts an attached volume into its instance's root.
        for volume in list(backend.volumes.values()):
            volumes.update(repr((volume.id, *volume_attachment(volume))).encode())
    rest = "\n".join([f"volumes {volumes.hexdigest()[:32]}"] + sorted(lines))
    # First, one digest of all the others: what a runner waiting for a change names (`?unchanged=`).
    return f"all {hashlib.sha256(rest.encode()).hexdigest()[:32]}\n{rest}\n"


def volume_attachments() -> bytes:
    """`{"attachments": [{"volume_id", "instance_id", "device"}]}`: every volume attachment in the attached state,
    what DescribeVolumes would show of them. The runner mounts these into instance roots after every change of
    the volumes digest; an unfiltered DescribeVolumes serialized all of the cloud's volumes (two root volumes per
    instance) at about 0.1 s of the emulator's one core a call at two hundred instances, several times per
    control-plane replacement. Not an AWS API.
    """
    import json

    out = []
    for backend in ec2_region_backends():
        for volume in list(backend.volumes.values()):
            instance_id, device, status = volume_attachment(volume)
            if instance_id is not None and status == "attached":
                out.append({"volume_id": volume.id, "instance_id": instance_id, "device": device or ""})
    return json.dumps({"attachments": out}).encode()


def fingerprint_digest(fingerprint: str) -> str:
    """The `all` digest on the first line of an [`instances_fingerprint`] body."""
    return fingerprint.split("\n", 1)[0].partition(" ")[2]


# Changes the instance runner acts on: bumped after every EC2 or Auto Scaling call that is not a read, so that
# a runner waiting for the fingerprint to change (`?unchanged=DIGEST&wait_ms=N`) hears of it at once.
CHANGES = threading.Condition()
GENERATION = [0]
READ_ONLY_PREFIXES = ("Describe", "Get", "List")
MAX_FINGERPRINT_WAIT_MS = 1500


def note_change(name: str) -> None:
    service, _, action = name.partition(":")
    if service in ("ec2", "autoscaling") and not action.startswith(READ_ONLY_PREFIXES):
        with CHANGES:
            GENERATION[0] += 1
            CHANGES.notify_all()


def fingerprint_when_changed(unchanged: str | None, wait_ms: int) -> tuple[str, float]:
    """The fingerprint, once its `all` digest differs from `unchanged` or after `wait_ms` (at most
    MAX_FINGERPRINT_WAIT_MS); at once without `unchanged`. Returns it with the time spent computing digests (not
    waiting).

    The runner used to ask every 250 ms and so saw a change (an instance launched, a volume attached) up to
    250 ms late, twice per etcd volume re-attach; waiting here costs a thread and no polling."""
    import time

    deadline = time.monotonic() + min(max(wait_ms, 0), MAX_FINGERPRINT_WAIT_MS) / 1000.0
    spent = 0.0
    while True:
        with CHANGES:
            generation = GENERATION[0]
        started = time.perf_counter()
        fingerprint = instances_fingerprint()
        spent += time.perf_counter() - started
        left = deadline - time.monotonic()
        if unchanged is None or fingerprint_digest(fingerprint) != unchanged or left <= 0:
            return fingerprint, spent
        with CHANGES:
            # A change between reading the generation and here has bumped it already: no wait then.
            CHANGES.wait_for(lambda: GENERATION[0] != generation, timeout=left)


class CallStats:
    """Counts the emulator's requests by call and the time it spent on them: what a call costs here.

    `GET /_ballast/stats` returns {"Service:Action": [count, seconds, cpu_seconds]}: seconds are wall time summed
    over the serving threads (a call waiting for the GIL counts), cpu_seconds the serving thread's own CPU time
    (what the call cost the emulator, which runs on one core). The lifecycle benchmark reads it before and after
    each phase. Not an AWS API: only the local cloud's own tools ask for it.
    """

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.calls: dict[str, list] = {}

    @staticmethod
    def call_name(environ) -> str:
        import io
        import urllib.parse

        method = environ.get("REQUEST_METHOD", "")
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        action = (query.get("Action") or [""])[0]
        if not action and method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            # Put the body back for moto.
            environ["wsgi.input"] = io.BytesIO(body)
            if b"Action=" in body:
                form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
                action = (form.get("Action") or [""])[0]
                if action in ("DescribeInstances", "DescribeVolumes"):
                    # Who asks shows in how they ask: by id, by tags, by state. Counted apart, named by the
                    # filters used (`ec2:DescribeInstances{instance-id}`).
                    filters = sorted(
                        {v[0] for k, v in form.items() if k.startswith("Filter.") and k.endswith(".Name")}
                    )
                    if "InstanceId.1" in form or "VolumeId.1" in form:
                        filters.append("ids")
                    if filters:
                        action = f"{action}{{{','.join(filters)}}}"
        if not action:
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            action = target.rsplit(".", 1)[-1]
        if action:
            auth = environ.get("HTTP_AUTHORIZATION", "")
            # Credential=KEY/DATE/REGION/SERVICE/aws4_request
            service = auth.split("Credential=", 1)[-1].split("/")[3] if "Credential=" in auth else "?"
            return f"{service}:{action}"
        return f"s3:{method}"

    def count(self, name: str, wall: float, cpu: float) -> None:
        with self.lock:
            entry = self.calls.setdefault(name, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += wall
            entry[2] += cpu

    def __call__(self, environ, start_response):
        import json
        import time

        def answer(body: bytes, content_type: str = "application/json"):  # type: ignore[no-untyped-def]
            start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
            return [body]

        path = environ.get("PATH_INFO")
        if path == STATS_PATH:
            with self.lock:
                body = json.dumps(self.calls).encode()
            return answer(body)
        if path == FINGERPRINT_PATH:
            import urllib.parse

            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
            unchanged = (query.get("unchanged") or [None])[0]
            try:
                wait_ms = int((query.get("wait_ms") or ["0"])[0])
            except ValueError:
                wait_ms = 0
            started_cpu = time.thread_time()
            fingerprint, spent = fingerprint_when_changed(unchanged, wait_ms)
            # Wall time: computing the digests, not waiting for a change.
            self.count("local:InstancesFingerprint", spent, time.thread_time() - started_cpu)
            return answer(fingerprint.encode(), "text/plain")
        if path == ATTACHMENTS_PATH:
            started, started_cpu = time.perf_counter(), time.thread_time()
            body = volume_attachments()
            self.count("local:VolumeAttachments", time.perf_counter() - started, time.thread_time() - started_cpu)
            return answer(body)
        if path == POWER_CUTS_PATH:
            # Not counted: the runner asks only when instances left the running state.
            return answer(power_cuts())
        if path == LIFECYCLE_ACTIONS_PATH:
            return answer(lifecycle_actions())
        try:
            name = self.call_name(environ)
        except Exception:  # counting must never break a request
            name = "?"
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            return self.app(environ, start_response)
        finally:
            self.count(name, time.perf_counter() - started, time.thread_time() - started_cpu)
            note_change(name)


def watch_stdin() -> None:
    """Exit the whole process when stdin hits EOF: the parent (a test harness) holds the write
    end of the pipe, so its death, however abrupt, closes it. os._exit skips cleanup on purpose:
    werkzeug's serve_forever would otherwise keep the process alive."""
    try:
        while sys.stdin.buffer.read(65536):
            pass
    except Exception:  # a closed or broken stdin means the same thing
        pass
    log.info("stdin closed: exiting")
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
    configure_environment(args)
    if os.environ.get("BALLAST_EMULATOR_ACCESS_LOG") != "1":
        # One log line per request cost the emulator a twelfth of its CPU at 100 instances (py-spy);
        # /_ballast/stats counts every call anyway. Errors are still logged.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    if args.exit_with_stdin:
        # Started before the slow moto import, so a parent dying during startup is honoured too.
        threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()

    apply_patches(args)

    from moto import settings
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    if args.iam_enforce:
        # Prove the import-time read took the value (it is a float in moto).
        assert settings.INITIAL_NO_AUTH_ACTION_COUNT == float(args.initial_no_auth)
        log.info(
            "IAM enforcement on after the first %d requests", args.initial_no_auth
        )
    else:
        assert settings.INITIAL_NO_AUTH_ACTION_COUNT == float("inf")

    moto_app = DomainDispatcherApplication(create_backend_app)
    moto_app.debug = True  # as moto.server.main does: error pages carry tracebacks
    app = CallStats(moto_app)
    try:
        # make_server binds and listens in its constructor, so a taken port fails here, before
        # "ready", and once it returns connections are accepted (queued until serve_forever).
        server = make_server(
            args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler
        )
    except OSError as e:
        print(
            f"launcher.py: cannot listen on {args.host}:{args.port}: {e.strerror or e}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(3)
    except SystemExit:
        # werkzeug prints its own "Address already in use" advice and exits 1; make it clear.
        print(
            f"launcher.py: cannot listen on {args.host}:{args.port} (port taken?)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(3)

    host, port = server.server_address[:2]
    global SELF_URL
    SELF_URL = f"http://{host}:{port}"
    # Connect once ourselves so "ready" really means "accepts connections".
    with socket.create_connection((host, port), timeout=5):
        pass
    print(f"ready http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
