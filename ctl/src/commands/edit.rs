//! `edit cluster` and `edit instancegroup`: $EDITOR on one object, validated before it is saved.
//!
//! The object's version is read with it; the save is conditional on that version, so a change someone made
//! while the editor was open is reported, never overwritten. An edit that cannot be saved (invalid, or
//! conflicting) is kept in a file whose path is printed, so no typing is lost: the editor's own private
//! folder (0700, named at random, made fresh for this edit), which is then not removed. A fixed name in the
//! shared temporary directory would let another user plant a symlink there and have the edit written
//! through it, or read it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use ballast_state::document::{object_to_yaml, parse_objects, SpecObject};
use ballast_store::registry::{RegistryError, SpecChange};
use ballast_store::store::Precondition;

use super::Context;
use crate::cli::{EditArgs, EditWhat};
use crate::error::{io_error, yaml_error, CommandError};

const HEADER: &str = "# Edit the object below and save to apply it; it is validated first.\n\
# Lines starting with '#' are ignored. Save an empty file, or quit without saving, to cancel.\n";

pub async fn run(context: &Context, args: EditArgs) -> Result<(), CommandError> {
    let (name, group) = match &args.what {
        EditWhat::Cluster { cluster_name } => {
            (context.cluster_name(cluster_name.as_deref())?, None)
        }
        EditWhat::Instancegroup { group } => (context.cluster_name(None)?, Some(group.clone())),
    };
    let registry = context.registry().await?;
    let stored = registry.load(&name).await?;
    let (original, precondition) = match &group {
        None => (
            SpecObject::Cluster(stored.config.cluster.clone()),
            Precondition::MustMatch(stored.cluster_version.clone()),
        ),
        Some(g) => {
            let ig = stored.config.instance_group(g).ok_or_else(|| {
                RegistryError::InstanceGroupNotFound {
                    cluster: name.clone(),
                    group: g.clone(),
                }
            })?;
            (
                SpecObject::InstanceGroup(ig.clone()),
                stored.group_precondition(g),
            )
        }
    };
    let before = object_to_yaml(&original).map_err(yaml_error)?;
    let workdir = tempfile::Builder::new()
        .prefix("ballast-edit-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(io_error("creating a temporary directory for the editor"))?;
    let path = workdir
        .path()
        .join(format!("{}.yaml", file_stem(&original)));
    write_private(&path, &format!("{HEADER}{before}"))?;
    run_editor(&path)?;
    // The editor may have left anything there: read as a spec file is, a regular file up to its limit.
    let edited =
        ballast_store::local_file::read_file_bounded(&path, ballast_state::limits::MAX_SPEC_FILE)
            .map_err(|e| CommandError::Usage(format!("{}: {e}; nothing was saved", path.display())))
            .and_then(|bytes| {
                String::from_utf8(bytes).map_err(|_| {
                    CommandError::Usage(format!(
                        "{}: not UTF-8 text; nothing was saved",
                        path.display()
                    ))
                })
            })?;
    let body: String = edited
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    if body.trim().is_empty() || body.trim() == before.trim() {
        eprintln!("Edit cancelled: nothing changed.");
        return Ok(());
    }

    let result = save(context, &name, &original, &body, precondition).await;
    if let Err(e) = &result {
        let kept = keep_edit(workdir, &path)?;
        eprintln!(
            "Your edit is kept in {}: fix it and run `ballast replace -f {} --name {name}`.",
            kept.display(),
            kept.display()
        );
        tracing::debug!(error = %e, "edit not saved");
    } else {
        eprintln!("Saved {}.", original.reference());
    }
    result
}

async fn save(
    context: &Context,
    name: &str,
    original: &SpecObject,
    body: &str,
    precondition: Precondition,
) -> Result<(), CommandError> {
    let mut objects =
        parse_objects(&original.reference(), body).map_err(CommandError::InvalidSpec)?;
    if objects.len() != 1 {
        return Err(CommandError::EditNotOneObject {
            count: objects.len(),
            object: original.reference(),
        });
    }
    let edited = objects.remove(0);
    if edited.reference() != original.reference() {
        return Err(CommandError::EditRenamed {
            object: original.reference(),
            became: edited.reference(),
        });
    }
    let mut change = SpecChange::default();
    match edited {
        SpecObject::Cluster(c) => change.cluster = Some((c, precondition)),
        SpecObject::InstanceGroup(ig) => change.put_groups.push((ig, precondition)),
    }
    let registry = context.registry().await?;
    registry.change(name, &change, &context.writer).await?;
    Ok(())
}

fn file_stem(object: &SpecObject) -> String {
    object.reference().replace('/', "-").to_lowercase()
}

fn write_private(path: &Path, text: &str) -> Result<(), CommandError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(format!("writing {}", path.display())))?;
    file.write_all(text.as_bytes())
        .map_err(io_error(format!("writing {}", path.display())))
}

/// Runs $VISUAL, $EDITOR or vi on the file. The variable may hold arguments (`code --wait`).
fn run_editor(path: &Path) -> Result<(), CommandError> {
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".to_string());
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("ballast-editor")
        .arg(path)
        .status()
        .map_err(io_error(format!("starting the editor {editor:?}")))?;
    if !status.success() {
        return Err(CommandError::EditorFailed { editor, status });
    }
    Ok(())
}

/// Keeps the editor's private folder (and so the edited file in it) past the end of the command, which
/// would otherwise remove it. The file is made 0600 again: an editor may have saved it with its own mode.
fn keep_edit(workdir: tempfile::TempDir, path: &Path) -> Result<PathBuf, CommandError> {
    let name = path.file_name().unwrap_or(path.as_os_str()).to_owned();
    let kept = workdir.keep().join(name);
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600))
        .map_err(io_error(format!("keeping the edit in {}", kept.display())))?;
    Ok(kept)
}
