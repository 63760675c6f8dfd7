use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::spec::ClusterConfig;

use super::*;
use crate::cloud::model::{cluster_model, StateLocation};

fn config(edit: impl FnOnce(&mut ClusterConfig)) -> (ClusterConfig, ClusterModel) {
    let mut config = generate(&ClusterTemplate {
        name: "demo.example.com".into(),
        zones: vec![
            "us-west-2a".into(),
            "us-west-2b".into(),
            "us-west-2c".into(),
        ],
        ..Default::default()
    })
    .expect("template");
    edit(&mut config);
    let completed = complete(&config);
    let model = cluster_model(
        &completed,
        &StateLocation::from_url("s3://state/clusters").expect("s3"),
    );
    (completed, model)
}

fn wanted_volumes() -> Vec<WantedVolume> {
    let (completed, model) = config(|_| {});
    wanted(&completed, &model).expect("wanted volumes")
}

/// The volume an apply of `want` leaves.
fn created(want: &WantedVolume) -> Volume {
    Volume {
        id: format!("vol-{}", want.member),
        zone: want.zone.clone(),
        size_gib: want.size_gib,
        volume_type: want.volume_type.clone(),
        iops: want.iops,
        throughput: want.throughput,
        encrypted: want.encrypted,
        tags: want.tags.clone(),
    }
}

fn applied(wanted: &[WantedVolume]) -> Actual {
    Actual {
        volumes: wanted
            .iter()
            .map(|w| (w.member.clone(), vec![created(w)]))
            .collect(),
    }
}

#[test]
fn one_encrypted_gp3_volume_per_member_in_its_groups_zone() {
    let wanted = wanted_volumes();
    assert_eq!(wanted.len(), 3);
    let zones: Vec<&str> = wanted.iter().map(|w| w.zone.as_str()).collect();
    assert_eq!(zones, ["us-west-2a", "us-west-2b", "us-west-2c"]);
    for w in &wanted {
        assert!(w.encrypted);
        assert_eq!(w.volume_type, "gp3");
        assert_eq!(w.size_gib, 20);
        assert_eq!(w.tags["kubernetes.io/cluster/demo.example.com"], "owned");
        assert_eq!(w.tags[ETCD_MEMBER_TAG], w.member);
        assert_eq!(w.tags["ballast.dev/instance-group"], w.group);
        assert_eq!(w.name, format!("{}.etcd.demo.example.com", w.member));
    }
    let changes = diff(&wanted, &Actual::default()).expect("diff");
    assert_eq!(changes.len(), 3);
    assert!(changes.iter().all(|c| matches!(c, Change::Create(_))));
}

#[test]
fn an_applied_state_plans_nothing() {
    let wanted = wanted_volumes();
    assert_eq!(diff(&wanted, &applied(&wanted)).expect("diff"), Vec::new());
}

#[test]
fn a_larger_size_or_another_type_is_changed_in_place() {
    let before = wanted_volumes();
    let (completed, model) = config(|c| {
        let etcd = c.cluster.spec.etcd.get_or_insert_with(Default::default);
        etcd.volume_size = Some(40);
        etcd.volume_type = Some("gp2".into());
    });
    let after = wanted(&completed, &model).expect("wanted");
    let changes = diff(&after, &applied(&before)).expect("diff");
    assert_eq!(changes.len(), 3);
    let Change::Modify {
        size_gib,
        volume_type,
        id,
        ..
    } = &changes[0]
    else {
        panic!("not a modify: {changes:?}");
    };
    assert_eq!(*size_gib, Some((20, 40)));
    assert_eq!(volume_type.clone(), Some(("gp3".into(), "gp2".into())));
    assert!(id.starts_with("vol-"));
}

#[test]
fn what_would_need_a_new_volume_is_refused_by_field() {
    let before = wanted_volumes();
    type Edit = Box<dyn Fn(&mut ClusterConfig)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "spec.etcd.volumeSize",
            Box::new(|c: &mut ClusterConfig| {
                c.cluster
                    .spec
                    .etcd
                    .get_or_insert_with(Default::default)
                    .volume_size = Some(10)
            }),
        ),
        (
            "spec.etcd.encryptedVolume",
            Box::new(|c: &mut ClusterConfig| {
                c.cluster
                    .spec
                    .etcd
                    .get_or_insert_with(Default::default)
                    .encrypted_volume = Some(false)
            }),
        ),
        (
            "spec.etcd.kmsKeyId",
            Box::new(|c: &mut ClusterConfig| {
                c.cluster
                    .spec
                    .etcd
                    .get_or_insert_with(Default::default)
                    .kms_key_id = Some("alias/etcd".into())
            }),
        ),
    ];
    for (field, edit) in cases {
        let (completed, model) = config(edit);
        let after = wanted(&completed, &model).expect("wanted");
        let err = diff(&after, &applied(&before)).expect_err(field);
        let message = err.to_string();
        assert!(
            matches!(err, UpdateError::VolumeRefused { field: f, .. } if f == field),
            "{field}: {message}"
        );
        assert!(message.contains("never replaces"), "{message}");
        assert!(message.contains(&format!("revert {field}")), "{message}");
    }
}

#[test]
fn a_volume_in_another_zone_is_refused() {
    let wanted = wanted_volumes();
    let mut actual = applied(&wanted);
    for volumes in actual.volumes.values_mut() {
        volumes[0].zone = "us-west-2d".into();
    }
    let err = diff(&wanted, &actual).expect_err("zone");
    assert!(
        err.to_string().contains("cannot move to another zone"),
        "{err}"
    );
}

#[test]
fn two_volumes_for_one_member_are_refused() {
    let wanted = wanted_volumes();
    let mut actual = applied(&wanted);
    let first = wanted[0].member.clone();
    let mut extra = actual.volumes[&first][0].clone();
    extra.id = "vol-extra".into();
    actual.volumes.entry(first).or_default().push(extra);
    let err = diff(&wanted, &actual).expect_err("duplicate");
    assert!(
        matches!(err, UpdateError::Duplicate { count: 2, .. }),
        "{err}"
    );
}

#[test]
fn a_control_plane_group_spanning_zones_is_refused() {
    let (completed, model) = config(|c| {
        let zones: Vec<String> = c
            .cluster
            .spec
            .subnets
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let group = c
            .instance_groups
            .iter_mut()
            .find(|g| g.spec.role == ballast_state::spec::Role::ControlPlane)
            .expect("a control-plane group");
        group.spec.subnets = zones;
    });
    let err = wanted(&completed, &model).expect_err("spans zones");
    let message = err.to_string();
    assert!(message.contains("spec.subnets"), "{message}");
    assert!(message.contains("exactly one zone"), "{message}");
}

#[test]
fn missing_tags_are_added() {
    let wanted = wanted_volumes();
    let mut actual = applied(&wanted);
    for volumes in actual.volumes.values_mut() {
        volumes[0].tags.remove("ballast.dev/instance-group");
    }
    let changes = diff(&wanted, &actual).expect("diff");
    assert_eq!(changes.len(), 3);
    assert!(matches!(&changes[0], Change::Tag { tags, .. } if tags.len() == 1));
}

#[test]
fn iops_and_throughput_change_in_place_and_gp3_s_baseline_is_no_change() {
    let before = wanted_volumes();
    // A volume made before the spec set any: EC2 reports gp3's baseline (or, as the local cloud, nothing).
    let mut reported = applied(&before);
    for volumes in reported.volumes.values_mut() {
        volumes[0].iops = Some(3000);
        volumes[0].throughput = Some(125);
    }
    assert_eq!(diff(&before, &reported).expect("diff"), Vec::new());
    assert_eq!(diff(&before, &applied(&before)).expect("diff"), Vec::new());

    let (completed, model) = config(|c| {
        let etcd = c.cluster.spec.etcd.get_or_insert_with(Default::default);
        etcd.volume_iops = Some(5000);
        etcd.volume_throughput = Some(250);
    });
    let after = wanted(&completed, &model).expect("wanted");
    let changes = diff(&after, &reported).expect("diff");
    assert_eq!(changes.len(), 3, "{changes:?}");
    let Change::Modify {
        size_gib,
        volume_type,
        iops,
        throughput,
        ..
    } = &changes[0]
    else {
        panic!("not a modify: {changes:?}");
    };
    assert_eq!((*size_gib, volume_type.clone()), (None, None));
    assert_eq!(*iops, Some((3000, 5000)));
    assert_eq!(*throughput, Some((125, 250)));
    // Once applied, nothing more; unset again, back to the baseline (never a new volume).
    assert_eq!(diff(&after, &applied(&after)).expect("diff"), Vec::new());
    let back = diff(&before, &applied(&after)).expect("diff");
    assert!(
        matches!(
            &back[0],
            Change::Modify {
                iops: Some((5000, 3000)),
                throughput: Some((250, 125)),
                ..
            }
        ),
        "{back:?}"
    );
}

#[test]
fn a_gp2_volume_s_reported_iops_are_not_a_change() {
    let (completed, model) = config(|c| {
        let etcd = c.cluster.spec.etcd.get_or_insert_with(Default::default);
        etcd.volume_type = Some("gp2".into());
    });
    let wanted = wanted(&completed, &model).expect("wanted");
    let mut reported = applied(&wanted);
    for volumes in reported.volumes.values_mut() {
        // gp2's IOPS follow its size (3 per GiB, at least 100): EC2 reports them, the spec cannot set them.
        volumes[0].iops = Some(100);
    }
    assert_eq!(diff(&wanted, &reported).expect("diff"), Vec::new());
}

#[test]
fn a_created_volume_is_planned_and_rendered_with_the_iops_set() {
    let (completed, model) = config(|c| {
        let etcd = c.cluster.spec.etcd.get_or_insert_with(Default::default);
        etcd.volume_iops = Some(4000);
    });
    let wanted = wanted(&completed, &model).expect("wanted");
    let planned = Change::Create(wanted[0].clone()).planned();
    let fields: Vec<(String, String)> = planned[0]
        .fields
        .iter()
        .map(|f| (f.field.clone(), f.to.clone()))
        .collect();
    assert!(
        fields.contains(&("iops".to_string(), "4000".to_string())),
        "{fields:?}"
    );
    assert!(
        !fields.iter().any(|(name, _)| name == "throughput"),
        "{fields:?}"
    );
}
