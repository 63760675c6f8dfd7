//! `import kops`: reads kops's YAML (bounded), maps it purely (`crate::import::kops`), and stores the cluster as
//! `create -f` does, through the registry. A refused field stores nothing.

use std::path::Path;

use ballast_state::error::{FieldError, SpecErrors};
use ballast_state::limits::{read_bounded, MAX_SPEC_FILE, MAX_SPEC_FILE_BYTES};
use ballast_state::spec::{ClusterConfig, Networking};
use ballast_store::local_file::{read_file_bounded, FileReadError};
use ballast_store::registry::check;
use serde::Serialize;

use super::Context;
use crate::cli::{ImportArgs, ImportFormat, ImportFrom, ImportKopsArgs, NetworkingArg};
use crate::error::{io_error, json_error, CommandError};
use crate::import::kops::{import, parse_documents, Choices, FieldFate, Import};
use crate::output;

pub async fn run(context: &Context, args: ImportArgs) -> Result<(), CommandError> {
    match args.from {
        ImportFrom::Kops(args) => kops(context, args).await,
    }
}

async fn kops(context: &Context, args: ImportKopsArgs) -> Result<(), CommandError> {
    let mut documents = Vec::new();
    for path in &args.files {
        let source = path.display().to_string();
        let text = read_text(path)?;
        documents.extend(parse_documents(&source, &text).map_err(CommandError::InvalidSpec)?);
    }
    let choices = Choices {
        networking: args.networking.map(|n| match n {
            NetworkingArg::AmazonVpc => Networking::AmazonVpc,
            NetworkingArg::Cilium => Networking::Cilium,
            NetworkingArg::Calico => Networking::Calico,
            NetworkingArg::Kubenet => Networking::Kubenet,
        }),
        ballast_images: args.ballast_images,
        no_public_ips: args.no_public_ips,
    };
    let imported = import(&documents, choices);
    let source = args
        .files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    // The dry run takes the same checks as the import, up to the write: what it accepts, the import stores.
    let checked = checked_config(context, &source, &imported);
    if args.dry_run {
        print_result(&imported, args.output)?;
        return checked.map(|_| ());
    }
    let config = checked?;
    let registry = context.registry().await?;
    super::create::store_new_cluster(context, &registry, &config).await?;
    match args.output {
        ImportFormat::Json => print!("{}", output::json(&imported.fields)?),
        ImportFormat::Table | ImportFormat::Yaml => eprint!("{}", fate_table(&imported.fields)),
    }
    Ok(())
}

/// The cluster the import stores: nothing refused, Ballast's own rules passed by the mapped spec, and the name
/// `--name` gives (if any) the kops cluster's. `import kops` and its `--dry-run` both stop here on an error.
fn checked_config(
    context: &Context,
    source: &str,
    imported: &Import,
) -> Result<ClusterConfig, CommandError> {
    let config = refusals(source, imported)?;
    check(config)?;
    if let Some(name) = context.name.as_deref() {
        if name != config.name() {
            return Err(CommandError::Usage(format!(
                "--name {name:?} differs from the kops cluster's name {:?}",
                config.name()
            )));
        }
    }
    Ok(config.clone())
}

/// The mapped cluster, or every refused field as one spec error each (exit 3: nothing was changed).
fn refusals<'a>(source: &str, imported: &'a Import) -> Result<&'a ClusterConfig, CommandError> {
    let errors: Vec<FieldError> = imported
        .refused()
        .map(|f| FieldError::new(&f.object, &f.path, f.fate.detail()))
        .collect();
    match &imported.config {
        Some(config) if errors.is_empty() => Ok(config),
        _ => Err(CommandError::InvalidSpec(SpecErrors::new(source, errors))),
    }
}

#[derive(Serialize)]
struct DryRun<'a> {
    spec: Vec<ballast_state::document::SpecObject>,
    fields: &'a [FieldFate],
}

fn print_result(imported: &Import, format: ImportFormat) -> Result<(), CommandError> {
    let objects = imported
        .config
        .as_ref()
        .map(super::create::spec_objects)
        .unwrap_or_default();
    match format {
        ImportFormat::Json => {
            let text = serde_json::to_string_pretty(&DryRun {
                spec: objects,
                fields: &imported.fields,
            })
            .map_err(json_error)?;
            println!("{text}");
        }
        ImportFormat::Yaml => {
            if !objects.is_empty() {
                print!("{}", output::yaml_documents(&objects)?);
            }
            eprint!("{}", fate_table(&imported.fields));
        }
        ImportFormat::Table => {
            if !objects.is_empty() {
                print!("{}", output::yaml_documents(&objects)?);
                println!();
            }
            print!("{}", fate_table(&imported.fields));
        }
    }
    Ok(())
}

/// The table of every field's fate: object, kops field, fate, what it became or why.
pub fn fate_table(fields: &[FieldFate]) -> String {
    let rows: Vec<Vec<String>> = fields
        .iter()
        .map(|f| {
            vec![
                f.object.clone(),
                f.path.clone(),
                f.fate.label().to_string(),
                f.fate.detail().to_string(),
            ]
        })
        .collect();
    output::table(&["OBJECT", "KOPS FIELD", "FATE", "BALLAST / WHY"], &rows)
}

/// A kops file's text, read as every file Ballast is given: regular files only, at most the spec limit.
fn read_text(path: &Path) -> Result<String, CommandError> {
    let source = path.display().to_string();
    if path == Path::new("-") {
        return read_bounded(std::io::stdin(), MAX_SPEC_FILE_BYTES)
            .map_err(io_error("reading stdin"));
    }
    match read_file_bounded(path, MAX_SPEC_FILE) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
            CommandError::Usage(format!("{source}: is not UTF-8 text, so not a kops spec"))
        }),
        Err(too_large @ FileReadError::TooLarge { .. }) => {
            Err(CommandError::InvalidSpec(SpecErrors::new(
                &source,
                vec![FieldError::new(
                    &source,
                    "",
                    format!("{too_large}: a cluster's spec is a few KiB"),
                )],
            )))
        }
        Err(FileReadError::NotAFile { kind }) => Err(CommandError::Usage(format!(
            "{source}: is {kind}, not a regular file: give a kops YAML file, or `-f -` to read standard input"
        ))),
        Err(FileReadError::Io(e)) => Err(io_error(format!("reading {source}"))(e)),
    }
}
