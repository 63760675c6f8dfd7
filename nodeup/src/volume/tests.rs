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
