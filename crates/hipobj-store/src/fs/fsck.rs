//! `hipobj-server fsck` and `scrub`: walks a data directory and reports
//! what the server would refuse or skip (owner records, bucket settings,
//! object files that do not read back) and, with `scrub`, every stored
//! byte that disagrees with its block checksum. It repairs only what the
//! operator names: an owner record for a bucket (`--assign-owner`), a
//! bucket setting (`--set`). Run it with the server stopped: it reads the
//! files as they are, and a write in flight may look damaged.

use std::path::{Path, PathBuf};

use super::bucket_encryption;
use super::canned::Canned;
use super::layout::{Disk, Stored};
use super::public_access::decode;
use super::settings::Setting;
use crate::disk::Durability;
use crate::names::check_bucket;
use crate::owner_record::{self, Lookup, OwnerRecord};

/// What to check and repair.
#[derive(Clone, Debug, Default)]
pub struct FsckOptions {
    /// Buckets have owner records (the gateway's `bucket_owners`).
    pub owner_records: bool,
    /// Check every block of every object and part against its checksum.
    pub scrub: bool,
    /// Owner records to write: (bucket, access key), the operator's choice.
    pub assign_owner: Vec<(String, String)>,
    /// Settings to write: (bucket, setting name, value); `none` removes.
    /// Names: `versioning`, `encryption`, `acl`, `public-access`.
    pub set: Vec<(String, String, String)>,
    /// Sync what is repaired.
    pub durability: Option<Durability>,
}

/// One thing found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The bucket.
    pub bucket: String,
    /// The object (key, or the file's name where the key cannot be read),
    /// or the setting; `None` for the bucket itself.
    pub item: Option<String>,
    /// What is wrong.
    pub problem: String,
}

/// What a walk found and did.
#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    /// The data directory's format marker (`super::format`): fsck walks
    /// only a format this release reads.
    pub format: super::format::Marker,
    /// Buckets walked.
    pub buckets: u64,
    /// Object, version and part files read.
    pub files: u64,
    /// Stored bytes checked against block checksums (scrub).
    pub bytes_checked: u64,
    /// Files that have no block checksums (written before they existed).
    pub unchecked_files: u64,
    /// What is wrong.
    pub findings: Vec<Finding>,
    /// What was repaired, one line each.
    pub repaired: Vec<String>,
}

fn setting_of(name: &str) -> Option<Setting> {
    Some(match name {
        "versioning" => Setting::Versioning,
        "encryption" => Setting::Encryption,
        "acl" => Setting::Acl,
        "public-access" => Setting::PublicAccessBlock,
        _ => return None,
    })
}

/// Whether the store's readers of setting `s` take `value` (versioning,
/// `bucket_encryption`, `acl`, `public_access`): what they refuse, fsck
/// reports.
fn valid_setting(s: Setting, value: &str) -> bool {
    match s {
        Setting::Versioning => matches!(value, "Enabled" | "Suspended"),
        Setting::Encryption => value == bucket_encryption::SSE_S3,
        Setting::Acl => matches!(Canned::parse(Some(value), false), Ok(Some(_))),
        Setting::PublicAccessBlock => decode(value).is_some(),
    }
}

/// The names in `dir`, sorted (none if it does not exist).
fn names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            for e in rd {
                if let Ok(n) = e?.file_name().into_string() {
                    out.push(n);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    out.sort();
    Ok(out)
}

/// Walks the data directory `root`: see the module documentation.
pub async fn fsck(root: &Path, opts: &FsckOptions) -> std::io::Result<FsckReport> {
    let mut r = FsckReport {
        format: super::format::read(root)?,
        ..FsckReport::default()
    };
    let d = opts.durability.unwrap_or(Durability::Synced);
    repair(root, opts, d, &mut r).await?;
    for bucket in names(root)? {
        if bucket.starts_with('.') || check_bucket(&bucket).is_err() || !root.join(&bucket).is_dir() {
            continue;
        }
        r.buckets += 1;
        let mut found = |item: Option<String>, problem: String| {
            r.findings.push(Finding {
                bucket: bucket.clone(),
                item,
                problem,
            });
        };
        if opts.owner_records {
            match owner_record::read(root, &bucket).await {
                Lookup::Found(_) => {}
                Lookup::Missing => found(
                    None,
                    "no owner record: the bucket refuses every request (--assign-owner BUCKET=KEY)".into(),
                ),
                Lookup::Damaged(why) => found(None, format!("damaged owner record ({why})")),
            }
        }
        for s in Setting::ALL {
            let p = root.join(s.folder()).join(&bucket);
            match std::fs::read(&p) {
                Ok(v) => {
                    let text = String::from_utf8_lossy(&v);
                    if !valid_setting(s, text.trim()) {
                        found(
                            Some(s.name().into()),
                            format!(
                                "damaged setting {:?}: requests that read it are refused",
                                text.trim()
                            ),
                        );
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => found(Some(s.name().into()), format!("unreadable setting: {e}")),
            }
        }
        let dir = root.join(&bucket);
        let mut files: Vec<PathBuf> = Vec::new();
        for n in names(&dir)? {
            let p = dir.join(&n);
            if n.starts_with(super::layout::FOLDER) && p.is_dir() {
                files.extend(names(&p)?.into_iter().map(|v| p.join(v)));
            } else {
                files.push(p);
            }
        }
        for p in files {
            let problem = check_file(&p, opts.scrub, &mut r).await;
            if let Some((item, problem)) = problem {
                r.findings.push(Finding {
                    bucket: bucket.clone(),
                    item: Some(item),
                    problem,
                });
            }
        }
    }
    // Parts of uploads in progress.
    let uploads = root.join(".uploads");
    for id in names(&uploads)? {
        for n in names(&uploads.join(&id))? {
            if !n.starts_with("part-") {
                continue;
            }
            if let Some((_, problem)) = check_file(&uploads.join(&id).join(&n), opts.scrub, &mut r).await {
                r.findings.push(Finding {
                    bucket: format!(".uploads/{id}"),
                    item: Some(n),
                    problem,
                });
            }
        }
    }
    Ok(r)
}

/// Reads one object, version or part file (and, for a scrub, checks all
/// its blocks); what is wrong with it, named by its key where that reads.
async fn check_file(path: &Path, scrub: bool, r: &mut FsckReport) -> Option<(String, String)> {
    r.files += 1;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let st = match Disk::read_stored(path).await {
        Ok(Some(st)) => st,
        Ok(None) => return None,
        Err(_) => return Some((file_name, "the file does not read back as an object".into())),
    };
    let name = if st.meta.key.is_empty() {
        file_name
    } else {
        st.meta.key.clone()
    };
    let checker = match Stored::checker(&st.meta) {
        Ok(Some(c)) => c,
        Ok(None) => {
            r.unchecked_files += 1;
            return None;
        }
        Err(_) => return Some((name, "its block checksums do not fit its length".into())),
    };
    if !scrub {
        return None;
    }
    let len = st.meta.stored_len();
    let mut body = match Stored::plain(st.file, (None, Some(checker)), 0, len).await {
        Ok(b) => b,
        Err(_) => return Some((name, "the file cannot be read".into())),
    };
    use futures::StreamExt as _;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => r.bytes_checked += c.len() as u64,
            Err(e) => return Some((name, format!("stored bytes disagree with their checksum: {e}"))),
        }
    }
    None
}

/// Writes what the operator asked for before the walk, so that the walk
/// reports the state after the repair.
async fn repair(root: &Path, opts: &FsckOptions, d: Durability, r: &mut FsckReport) -> std::io::Result<()> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    for (bucket, key) in &opts.assign_owner {
        if check_bucket(bucket).is_err() || !root.join(bucket).is_dir() {
            return Err(bad(format!(
                "--assign-owner: no bucket {bucket:?} in {}",
                root.display()
            )));
        }
        let rec = OwnerRecord::parse(key)
            .ok_or_else(|| bad(format!("--assign-owner: {key:?} is not an access key")))?;
        owner_record::write(root, bucket, &OwnerRecord::new(&rec.key), d).await?;
        r.repaired.push(format!(
            "bucket {bucket}: owner record written for key {}",
            rec.key
        ));
    }
    for (bucket, name, value) in &opts.set {
        if check_bucket(bucket).is_err() || !root.join(bucket).is_dir() {
            return Err(bad(format!("--set: no bucket {bucket:?} in {}", root.display())));
        }
        let s = setting_of(name).ok_or_else(|| {
            bad(format!(
                "--set: unknown setting {name:?} (versioning, encryption, acl, public-access)"
            ))
        })?;
        let path = root.join(s.folder()).join(bucket);
        if value == "none" {
            match crate::disk::nonblocking::remove_file(&path, d).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        } else {
            if !valid_setting(s, value) {
                return Err(bad(format!("--set: {value:?} is not a value of {name}")));
            }
            crate::disk::nonblocking::create_dir_all(&root.join(s.folder()), d).await?;
            let tmp = root
                .join(".tmp")
                .join(format!("fsck-{}", uuid::Uuid::new_v4().simple()));
            crate::disk::nonblocking::create_dir_all(&root.join(".tmp"), d).await?;
            crate::disk::nonblocking::write_atomic(&tmp, &path, value.as_bytes().to_vec(), d).await?;
        }
        r.repaired.push(format!("bucket {bucket}: {name} set to {value}"));
    }
    Ok(())
}
