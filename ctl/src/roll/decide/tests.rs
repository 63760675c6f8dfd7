use super::*;

fn instance(id: &str, hash: &str, launched: &str) -> InstanceView {
    InstanceView {
        id: id.to_string(),
        in_service: true,
        lifecycle: "InService".to_string(),
        node_spec_hash: Some(hash.to_string()),
        template_version: None,
        launched: Some(launched.to_string()),
        configured_hash: Some(hash.to_string()),
        node_name: None,
    }
}

fn group(role: Role, desired: i32, instances: Vec<InstanceView>) -> GroupView {
    GroupView {
        name: "g".to_string(),
        role,
        sizes: Sizes {
            min: desired,
            max: desired,
            desired,
        },
        want_hash: Some("new".to_string()),
        want_template_version: None,
        instances,
        marker: None,
    }
}

fn healthy(ids: &[&str]) -> EtcdView {
    let set: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
    EtcdView {
        healthy: true,
        voters: set.clone(),
        expected: ids.len(),
        in_service: set,
        problems: Vec::new(),
    }
}

#[test]
fn reasons_name_what_changed() {
    let mut g = group(Role::Node, 3, vec![]);
    g.want_template_version = Some("4".into());
    let current = instance("i-1", "new", "2026-01-01T00:00:00Z");
    assert_eq!(needs_update(&g, &current, None), None);
    let old = instance("i-2", "old0123456789abc", "2026-01-01T00:00:00Z");
    let reason = needs_update(&g, &old, None).expect("outdated");
    assert_eq!(
        reason.to_string(),
        "node spec changed (old012345678 -> new)"
    );
    let mut untagged = current.clone();
    untagged.node_spec_hash = None;
    assert_eq!(needs_update(&g, &untagged, None), Some(Reason::NoSpecTag));
    let mut older_template = current.clone();
    older_template.template_version = Some("3".into());
    assert_eq!(
        needs_update(&g, &older_template, None),
        Some(Reason::TemplateVersion {
            have: "3".into(),
            want: "4".into()
        })
    );
    // --force replaces what launched before the roll, never what the roll launched itself.
    let started = "2026-01-01T12:00:00Z";
    assert_eq!(
        needs_update(&g, &current, Some(started)),
        Some(Reason::Forced)
    );
    let relaunched = instance("i-3", "new", "2026-01-01T12:00:05Z");
    assert_eq!(needs_update(&g, &relaunched, Some(started)), None);
    // A group without a node spec yet: nothing to judge against.
    g.want_hash = None;
    assert_eq!(needs_update(&g, &old, None), None);
}

#[test]
fn outdated_skips_terminating_and_goes_oldest_first() {
    let mut terminating = instance("i-0", "old", "2025-12-31T00:00:00Z");
    terminating.lifecycle = "Terminating".into();
    terminating.in_service = false;
    let g = group(
        Role::Node,
        3,
        vec![
            instance("i-b", "old", "2026-01-02T00:00:00Z"),
            terminating,
            instance("i-a", "old", "2026-01-01T00:00:00Z"),
            instance("i-c", "new", "2026-01-01T00:00:00Z"),
        ],
    );
    let ids: Vec<String> = outdated(&g, None).into_iter().map(|(i, _)| i.id).collect();
    assert_eq!(ids, ["i-a", "i-b"]);
}

#[test]
fn control_plane_first_then_nodes_and_unknown_groups_are_named() {
    let groups = vec![
        ("nodes".to_string(), Role::Node),
        ("control-plane-b".to_string(), Role::ControlPlane),
        ("gpu".to_string(), Role::Node),
        ("control-plane-a".to_string(), Role::ControlPlane),
    ];
    assert_eq!(
        order(&groups, &[], &[]).expect("order"),
        ["control-plane-a", "control-plane-b", "gpu", "nodes"]
    );
    assert_eq!(
        order(&groups, &["nodes".into()], &[]).expect("order"),
        ["nodes"]
    );
    assert_eq!(
        order(&groups, &[], &[Role::ControlPlane]).expect("order"),
        ["control-plane-a", "control-plane-b"]
    );
    let error = order(&groups, &["nope".into()], &[])
        .expect_err("unknown")
        .to_string();
    assert!(error.contains("no instance group named nope"), "{error}");
    assert!(
        error.contains("control-plane-a, control-plane-b, gpu, nodes"),
        "{error}"
    );
}

#[test]
fn a_member_goes_only_when_every_voter_is_there() {
    assert_eq!(control_plane_gate(&healthy(&["i-1", "i-2", "i-3"])), Ok(()));
    let mut missing = healthy(&["i-1", "i-2"]);
    missing.expected = 3;
    let why = control_plane_gate(&missing)
        .expect_err("missing a member")
        .to_string();
    assert!(why.contains("etcd is missing a member: 2 of 3"), "{why}");
    let mut sick = healthy(&["i-1", "i-2", "i-3"]);
    sick.healthy = false;
    sick.problems.push("i-2: no leader".into());
    assert!(control_plane_gate(&sick)
        .expect_err("sick")
        .to_string()
        .contains("i-2: no leader"));
    // A replacement in service that is not voting yet, and a voter that is gone.
    let mut replacing = healthy(&["i-1", "i-2", "i-3"]);
    replacing.in_service.remove("i-3");
    replacing.in_service.insert("i-4".into());
    let why = control_plane_gate(&replacing)
        .expect_err("replacing")
        .to_string();
    assert!(
        why.contains("not yet voting: [i-4]") && why.contains("[i-3]"),
        "{why}"
    );
}

#[test]
fn a_control_plane_group_replaces_then_waits_for_its_new_member() {
    let old = instance("i-old", "old", "2026-01-01T00:00:00Z");
    let g = group(Role::ControlPlane, 1, vec![old.clone()]);
    let etcd = healthy(&["i-old", "i-x", "i-y"]);
    assert_eq!(
        control_plane_step(&g, None, &etcd),
        ControlPlaneStep::Replace("i-old".into())
    );
    // Refused while another member is missing.
    let mut short = etcd.clone();
    short.voters.remove("i-x");
    short.in_service.remove("i-x");
    assert!(
        matches!(control_plane_step(&g, None, &short), ControlPlaneStep::Wait(w) if w.contains("missing a member"))
    );
    // Just terminated: the replacement is launched but not configured yet.
    let mut terminating = old.clone();
    terminating.lifecycle = "Terminating".into();
    let mut fresh = instance("i-new", "new", "2026-01-01T01:00:00Z");
    fresh.configured_hash = None;
    let g = group(Role::ControlPlane, 1, vec![terminating, fresh.clone()]);
    assert!(
        matches!(control_plane_step(&g, None, &etcd), ControlPlaneStep::Wait(w) if w.contains("i-new"))
    );
    // Configured, but etcd has not taken it in yet.
    fresh.configured_hash = Some("new".into());
    let g = group(Role::ControlPlane, 1, vec![fresh]);
    let mut joining = etcd.clone();
    joining.in_service.remove("i-old");
    joining.in_service.insert("i-new".into());
    assert!(
        matches!(control_plane_step(&g, None, &joining), ControlPlaneStep::Wait(w) if w.contains("not yet voting: [i-new]"))
    );
    assert_eq!(
        control_plane_step(&g, None, &healthy(&["i-new", "i-x", "i-y"])),
        ControlPlaneStep::Done
    );
    // Nothing launched at all yet.
    let empty = group(Role::ControlPlane, 1, vec![]);
    assert!(
        matches!(control_plane_step(&empty, None, &etcd), ControlPlaneStep::Wait(w) if w.contains("0 of 1"))
    );
}

fn pace(surge: u32, unavailable: u32) -> Pace {
    Pace { surge, unavailable }
}

#[test]
fn a_node_group_surges_replaces_and_puts_its_sizes_back() {
    let original = Sizes {
        min: 4,
        max: 4,
        desired: 4,
    };
    let olds: Vec<InstanceView> = (0..4)
        .map(|n| instance(&format!("i-{n}"), "old", &format!("2026-01-01T00:00:0{n}Z")))
        .collect();
    let mut g = group(Role::Node, 4, olds.clone());
    // 1. Surge by one, raising maxSize to make room.
    assert_eq!(
        node_step(&g, original, pace(1, 0), None),
        NodeStep::Resize(Sizes {
            min: 4,
            max: 5,
            desired: 5
        })
    );
    g.sizes = Sizes {
        min: 4,
        max: 5,
        desired: 5,
    };
    // 2. The surge instance launched but is not configured: wait.
    let mut new0 = instance("i-n0", "new", "2026-01-01T01:00:00Z");
    new0.configured_hash = None;
    g.instances.push(new0.clone());
    assert!(
        matches!(node_step(&g, original, pace(1, 0), None), NodeStep::Wait(w) if w.contains("i-n0"))
    );
    // 3. Configured: replace the oldest, the group relaunching it (3 old left after, surge still needed).
    g.instances.pop();
    new0.configured_hash = Some("new".into());
    g.instances.push(new0);
    assert_eq!(
        node_step(&g, original, pace(1, 0), None),
        NodeStep::Replace {
            ids: vec!["i-0".into()],
            decrement: 0
        }
    );
    // 4. The last old instance goes with should-decrement: the surge ends with it.
    let mut last = group(Role::Node, 5, vec![olds[3].clone()]);
    last.sizes = Sizes {
        min: 4,
        max: 5,
        desired: 5,
    };
    for n in 0..4 {
        last.instances
            .push(instance(&format!("i-n{n}"), "new", "2026-01-01T01:00:00Z"));
    }
    assert_eq!(
        node_step(&last, original, pace(1, 0), None),
        NodeStep::Replace {
            ids: vec!["i-3".into()],
            decrement: 1
        }
    );
    // 5. All replaced, sizes back to normal but maxSize still raised: put it back, then done.
    last.instances.remove(0);
    last.sizes = Sizes {
        min: 4,
        max: 5,
        desired: 4,
    };
    assert_eq!(
        node_step(&last, original, pace(1, 0), None),
        NodeStep::Resize(original)
    );
    last.sizes = original;
    assert_eq!(node_step(&last, original, pace(1, 0), None), NodeStep::Done);
}

#[test]
fn batches_follow_surge_plus_unavailable_and_never_overshoot() {
    let original = Sizes {
        min: 0,
        max: 10,
        desired: 10,
    };
    let mut g = group(
        Role::Node,
        10,
        (0..10)
            .map(|n| {
                instance(
                    &format!("i-{n:02}"),
                    "old",
                    &format!("2026-01-01T00:00:{n:02}Z"),
                )
            })
            .collect(),
    );
    // surge 3, unavailable 2: maxSize raised to 13, batches of 5.
    g.sizes = Sizes {
        min: 0,
        max: 10,
        desired: 10,
    };
    assert_eq!(
        node_step(&g, original, pace(3, 2), None),
        NodeStep::Resize(Sizes {
            min: 0,
            max: 13,
            desired: 13
        })
    );
    g.sizes = Sizes {
        min: 0,
        max: 13,
        desired: 13,
    };
    for n in 0..3 {
        g.instances
            .push(instance(&format!("i-n{n}"), "new", "2026-01-01T01:00:00Z"));
    }
    // 10 old left: 5 go; 5 left after, still more than the surge: none decrement.
    assert_eq!(
        node_step(&g, original, pace(3, 2), None),
        NodeStep::Replace {
            ids: (0..5).map(|n| format!("i-{n:02}")).collect(),
            decrement: 0
        }
    );
    // 4 old left (surge 3 -> desired 13): the batch of 4 takes them all and all three surge slots end.
    g.instances
        .retain(|i| i.node_spec_hash.as_deref() == Some("new"));
    for n in 0..4 {
        g.instances
            .push(instance(&format!("i-o{n}"), "old", "2026-01-01T00:00:00Z"));
    }
    for n in 3..9 {
        g.instances
            .push(instance(&format!("i-n{n}"), "new", "2026-01-01T01:00:00Z"));
    }
    assert_eq!(
        node_step(&g, original, pace(3, 2), None),
        NodeStep::Replace {
            ids: (0..4).map(|n| format!("i-o{n}")).collect(),
            decrement: 3
        }
    );
    // A resumed roll with one old instance left lowers the surge to 1 first.
    g.instances
        .retain(|i| i.node_spec_hash.as_deref() == Some("new"));
    g.instances
        .push(instance("i-z", "old", "2026-01-01T00:00:00Z"));
    assert_eq!(
        node_step(&g, original, pace(3, 2), None),
        NodeStep::Resize(Sizes {
            min: 0,
            max: 11,
            desired: 11
        })
    );
}

#[test]
fn a_batch_terminates_only_what_it_drained_each_with_its_decrement() {
    let ids: Vec<String> = ["i-1", "i-2", "i-3", "i-4"].map(String::from).into();
    let none = BTreeSet::new();
    // The last `decrement` shrink the surge; the rest are replaced.
    assert_eq!(
        batch_terminations(&ids, 1, &none),
        [
            ("i-1", false),
            ("i-2", false),
            ("i-3", false),
            ("i-4", true)
        ]
        .map(|(id, shrink)| (id.to_string(), shrink))
    );
    // A decrement larger than the batch shrinks it all.
    assert!(batch_terminations(&ids, 9, &none)
        .iter()
        .all(|(_, shrink)| *shrink));
    // i-2's and i-4's drains failed: they are not terminated, the others keep their decrements.
    let undrained: BTreeSet<String> = ["i-2", "i-4"].map(String::from).into();
    assert_eq!(
        batch_terminations(&ids, 2, &undrained),
        [("i-1", false), ("i-3", true)].map(|(id, shrink)| (id.to_string(), shrink))
    );
    let all: BTreeSet<String> = ids.iter().cloned().collect();
    assert!(batch_terminations(&ids, 0, &all).is_empty());
}

#[test]
fn the_marker_round_trips_through_its_tag() {
    let marker = RollMarker::new(
        Sizes {
            min: 1,
            max: 4,
            desired: 4,
        },
        "2026-01-01T00:00:00Z",
        true,
    );
    let tag = marker.to_tag();
    assert!(tag.len() < 256, "{tag}");
    assert_eq!(RollMarker::from_tag(&tag).expect("its own tag"), marker);
    assert_eq!(marker.sizes().desired, 4);
    let bad = RollMarker::from_tag("{\"min\":1}").expect_err("not a whole marker");
    assert!(bad.to_string().contains("missing field"), "{bad}");
}
