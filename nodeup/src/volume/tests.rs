use super::*;

fn volume(state: &str, attachments: &[(&str, &str)]) -> FoundVolume {
    FoundVolume {
        id: "vol-1".into(),
        state: state.into(),
        attachments: attachments
            .iter()
            .map(|(instance, state)| Attachment {
                instance_id: (*instance).into(),
                state: (*state).into(),
                device: "/dev/sdf".into(),
            })
            .collect(),
    }
}

#[test]
fn a_free_volume_is_attached() {
    assert_eq!(
        decide_attach(&[volume("available", &[])], "i-me"),
        AttachStep::Attach {
            volume_id: "vol-1".into()
        }
    );
}

#[test]
fn a_volume_attached_here_is_used() {
    assert_eq!(
        decide_attach(&[volume("in-use", &[("i-me", "attached")])], "i-me"),
        AttachStep::Attached {
            volume_id: "vol-1".into(),
            device: "/dev/sdf".into()
        }
    );
    assert!(matches!(
        decide_attach(&[volume("in-use", &[("i-me", "attaching")])], "i-me"),
        AttachStep::Wait { .. }
    ));
}

#[test]
fn a_volume_held_by_another_instance_is_waited_for_never_taken() {
    for state in ["attached", "attaching", "detaching", "busy"] {
        let step = decide_attach(&[volume("in-use", &[("i-old", state)])], "i-me");
        let AttachStep::Wait { reason } = step else {
            panic!("{state}: {step:?}");
        };
        assert!(reason.contains("i-old"), "{reason}");
    }
    // Detached attachments are history.
    assert_eq!(
        decide_attach(&[volume("available", &[("i-old", "detached")])], "i-me"),
        AttachStep::Attach {
            volume_id: "vol-1".into()
        }
    );
}

#[test]
fn a_volume_being_created_is_waited_for() {
    assert!(matches!(
        decide_attach(&[volume("creating", &[])], "i-me"),
        AttachStep::Wait { .. }
    ));
}

#[test]
fn none_or_several_volumes_are_not_guessed_between() {
    assert_eq!(decide_attach(&[], "i-me"), AttachStep::Missing);
    assert_eq!(
        decide_attach(&[volume("deleting", &[])], "i-me"),
        AttachStep::Missing
    );
    let mut second = volume("available", &[]);
    second.id = "vol-2".into();
    assert_eq!(
        decide_attach(&[volume("available", &[]), second], "i-me"),
        AttachStep::Ambiguous {
            volume_ids: vec!["vol-1".into(), "vol-2".into()]
        }
    );
}

#[test]
fn a_device_is_looked_for_under_every_name_the_kernel_may_give_it() {
    let candidates = device_candidates("vol-0abc", "/dev/sdf");
    assert_eq!(
        candidates,
        [
            PathBuf::from("/dev/sdf"),
            PathBuf::from("/dev/xvdf"),
            PathBuf::from("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc"),
        ]
    );
}

#[test]
fn only_a_blank_volume_is_formatted() {
    assert_eq!(decide_format(&Contents::Blank), FormatDecision::Format);
    assert_eq!(
        decide_format(&Contents::Formatted {
            kind: "ext4".into()
        }),
        FormatDecision::Keep
    );
    assert!(matches!(
        decide_format(&Contents::Unknown {
            reason: "blkid failed".into()
        }),
        FormatDecision::Refuse { .. }
    ));
}

#[test]
fn files_in_the_state_directory_are_never_hidden() {
    assert_eq!(decide_mount(MountPoint::Empty), Ok(true));
    assert_eq!(decide_mount(MountPoint::Mounted), Ok(false));
    assert!(decide_mount(MountPoint::HoldsFiles).is_err());
}

#[test]
fn an_extra_volume_is_formatted_only_when_blank_and_never_as_another_filesystem() {
    assert_eq!(
        decide_format_as(&Contents::Blank, "xfs"),
        FormatDecision::Format
    );
    let ext4 = Contents::Formatted {
        kind: "ext4".into(),
    };
    assert_eq!(decide_format_as(&ext4, "ext4"), FormatDecision::Keep);
    match decide_format_as(&ext4, "xfs") {
        FormatDecision::Refuse { reason } => {
            assert!(
                reason.contains("ext4") && reason.contains("xfs"),
                "{reason}"
            )
        }
        other => panic!("an ext4 device asked for as xfs: {other:?}"),
    }
    let directory = Contents::Formatted {
        kind: "directory".into(),
    };
    assert_eq!(decide_format_as(&directory, "xfs"), FormatDecision::Keep);
    assert!(matches!(
        decide_format_as(
            &Contents::Unknown {
                reason: "blkid failed".into()
            },
            "ext4"
        ),
        FormatDecision::Refuse { .. }
    ));
}

#[test]
fn an_extra_volume_is_looked_for_under_both_names_and_its_nvme_link() {
    assert_eq!(
        extra_device_candidates("/dev/xvdh", Some("vol-0abc")),
        [
            PathBuf::from("/dev/xvdh"),
            PathBuf::from("/dev/sdh"),
            PathBuf::from("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc"),
        ]
    );
    assert_eq!(extra_device_candidates("/dev/sdg", None).len(), 2);
    let mappings = std::collections::BTreeMap::from([
        ("/dev/xvda".to_string(), "vol-root".to_string()),
        ("/dev/sdh".to_string(), "vol-h".to_string()),
    ]);
    assert_eq!(volume_on(&mappings, "/dev/sdh"), Some("vol-h"));
    assert_eq!(volume_on(&mappings, "/dev/xvdh"), Some("vol-h"));
    assert_eq!(volume_on(&mappings, "/dev/sdg"), None);
}
