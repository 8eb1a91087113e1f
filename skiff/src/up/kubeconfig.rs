//! The kubeconfig `skiff up` writes so that kubectl and every client library reach the
//! cluster with no flags: a cluster, a user and a context, each named `skiff`, merged into the
//! file kubectl reads (the first path of `$KUBECONFIG`, else `~/.kube/config`). Entries with
//! other names, and every other key of the file, are kept as they were; the context becomes
//! the current one, and the one it replaced is reported so the user can switch back.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_yaml_ng::{Mapping, Value};

/// The name of the cluster, user and context Skiff writes.
pub const NAME: &str = "skiff";

/// The kubeconfig kubectl reads: the first entry of `$KUBECONFIG`, else `~/.kube/config`.
pub fn path() -> PathBuf {
    if let Some(list) = std::env::var_os("KUBECONFIG")
        && let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty())
    {
        return first;
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".kube").join("config")
}

/// What [`write`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The current context before, when it was another.
    pub previous_context: Option<String>,
}

/// The files of a secured cluster: the CA kubectl checks the server against, and the client
/// certificate (with its key) that names the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Merges the `skiff` cluster (at `server`), user and context into the kubeconfig at `path`
/// and makes the context current. The file is replaced atomically and readable by its owner
/// only, as kubectl writes it.
pub fn write(path: &Path, server: &str, credentials: Option<&Credentials>) -> Result<Written> {
    let mut config = match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => serde_yaml_ng::from_str::<Value>(&text)
            .with_context(|| format!("{}: not a kubeconfig (YAML)", path.display()))?,
        Ok(_) => Value::Mapping(Mapping::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Mapping(Mapping::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let written = merge(&mut config, server, credentials)
        .with_context(|| format!("{}: not a kubeconfig", path.display()))?;
    let text = serde_yaml_ng::to_string(&config).context("encoding the kubeconfig")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("skiff-tmp");
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(written)
}

/// Puts an entry `{name: skiff, <field>: body}` into the list `key`, replacing one of that name.
fn upsert(config: &mut Mapping, key: &str, field: &str, body: Value) -> Result<()> {
    let list = config
        .entry(Value::from(key))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if list.is_null() {
        *list = Value::Sequence(Vec::new());
    }
    let Value::Sequence(items) = list else {
        bail!("{key}: expected a list");
    };
    let mut entry = Mapping::new();
    entry.insert(Value::from("name"), Value::from(NAME));
    entry.insert(Value::from(field), body);
    match items
        .iter_mut()
        .find(|i| i.get("name").and_then(Value::as_str) == Some(NAME))
    {
        Some(existing) => *existing = Value::Mapping(entry),
        None => items.push(Value::Mapping(entry)),
    }
    Ok(())
}

fn merge(config: &mut Value, server: &str, credentials: Option<&Credentials>) -> Result<Written> {
    if config.is_null() {
        *config = Value::Mapping(Mapping::new());
    }
    let Value::Mapping(map) = config else {
        bail!("expected a mapping at the top level");
    };
    map.entry(Value::from("apiVersion"))
        .or_insert_with(|| Value::from("v1"));
    map.entry(Value::from("kind"))
        .or_insert_with(|| Value::from("Config"));
    let path = |p: &Path| Value::from(p.to_string_lossy().into_owned());
    let mut cluster = Mapping::new();
    cluster.insert(Value::from("server"), Value::from(server));
    let mut user = Mapping::new();
    if let Some(c) = credentials {
        cluster.insert(Value::from("certificate-authority"), path(&c.ca));
        user.insert(Value::from("client-certificate"), path(&c.cert));
        user.insert(Value::from("client-key"), path(&c.key));
    }
    upsert(map, "clusters", "cluster", Value::Mapping(cluster))?;
    upsert(map, "users", "user", Value::Mapping(user))?;
    let mut context = Mapping::new();
    context.insert(Value::from("cluster"), Value::from(NAME));
    context.insert(Value::from("user"), Value::from(NAME));
    upsert(map, "contexts", "context", Value::Mapping(context))?;
    let previous = map
        .get("current-context")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty() && *c != NAME)
        .map(str::to_string);
    map.insert(Value::from("current-context"), Value::from(NAME));
    Ok(Written {
        previous_context: previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another cluster's entries and settings survive; Skiff's are added once, replaced on a
    /// second write, and made current.
    #[test]
    fn merges_without_clobbering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: https://prod:6443}\nusers:\n- name: admin\n  user: {token: t}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: admin}\ncurrent-context: prod\npreferences: {colors: true}\n",
        )
        .unwrap();
        let w = write(&path, "http://127.0.0.1:2382", None).unwrap();
        assert_eq!(w.previous_context.as_deref(), Some("prod"));
        let w = write(&path, "http://127.0.0.1:2482", None).unwrap();
        assert_eq!(w.previous_context, None);
        let v: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["current-context"].as_str(), Some("skiff"));
        assert_eq!(v["preferences"]["colors"].as_bool(), Some(true));
        let clusters = v["clusters"].as_sequence().unwrap();
        assert_eq!(clusters.len(), 2);
        assert_eq!(
            clusters[1]["cluster"]["server"].as_str(),
            Some("http://127.0.0.1:2482")
        );
        assert_eq!(v["users"][0]["user"]["token"].as_str(), Some("t"));
        assert_eq!(v["contexts"].as_sequence().unwrap().len(), 2);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A secured cluster's entry names the CA and the client certificate and key.
    #[test]
    fn credentials_go_into_the_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        let creds = Credentials {
            ca: "/c/ca.pem".into(),
            cert: "/c/admin.pem".into(),
            key: "/c/admin-key.pem".into(),
        };
        write(&path, "https://127.0.0.1:2382", Some(&creds)).unwrap();
        let v: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cluster = &v["clusters"][0]["cluster"];
        assert_eq!(cluster["certificate-authority"].as_str(), Some("/c/ca.pem"));
        assert_eq!(cluster["server"].as_str(), Some("https://127.0.0.1:2382"));
        let user = &v["users"][0]["user"];
        assert_eq!(user["client-certificate"].as_str(), Some("/c/admin.pem"));
        assert_eq!(user["client-key"].as_str(), Some("/c/admin-key.pem"));
    }

    /// A missing file (and its directory) is created.
    #[test]
    fn creates_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".kube").join("config");
        let w = write(&path, "http://127.0.0.1:2382", None).unwrap();
        assert_eq!(w.previous_context, None);
        let v: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["kind"].as_str(), Some("Config"));
        assert_eq!(
            v["contexts"][0]["context"]["cluster"].as_str(),
            Some("skiff")
        );
    }
}
