//! The volume manager against the filesystem, without a cluster API: what each source
//! writes, what containers mount, and the errors the kubelet would report.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::engine::fixtures::pod;

/// A node of 4 cores and 8 GiB.
fn volumes(root: &Path) -> Volumes {
    let allocatable: ResourceList = [("cpu", "4"), ("memory", "8Gi")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.parse().expect("a quantity")))
        .collect();
    Volumes::new(root.to_owned(), None, false, DEFAULT_RESYNC, allocatable)
}

/// emptyDir, downwardAPI and hostPath volumes are made; containers mount them (a subPath
/// within an emptyDir is made; the API's data read-only whatever the mount says); teardown
/// removes the pod's directory, and orphans go.
#[tokio::test]
async fn local_volumes_are_made_mounted_and_removed() {
    let root = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let made = host.path().join("made");
    let mut p = pod(
        serde_json::json!({"nodeName": "n1", "containers": [{"name": "c", "image": "i",
        "volumeMounts": [
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "scratch", "mountPath": "/cache", "subPath": "cache"},
            {"name": "info", "mountPath": "/etc/podinfo"},
            {"name": "host", "mountPath": "/host"}]}],
        "volumes": [
            {"name": "scratch", "emptyDir": {}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
                {"path": "cpu_limit", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu"}},
                {"path": "mem_limit", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}]}},
            {"name": "host", "hostPath": {"path": made.to_str().unwrap(), "type": "DirectoryOrCreate"}}]}),
    );
    p.metadata.labels.insert("app".into(), "web".into());
    let v = volumes(root.path());
    v.set_up(&p).await.unwrap();
    let mounts = v.mounts(&p, &p.spec.containers[0], &[]).unwrap();
    let scratch = root
        .path()
        .join("u/volumes/kubernetes.io~empty-dir/scratch");
    let info = root
        .path()
        .join("u/volumes/kubernetes.io~downward-api/info");
    assert_eq!(
        mounts,
        vec![
            Mount {
                host_path: scratch.clone(),
                container_path: "/scratch".into(),
                read_only: false,
                propagation: Propagation::Private,
            },
            Mount {
                host_path: scratch.join("cache"),
                container_path: "/cache".into(),
                read_only: false,
                propagation: Propagation::Private,
            },
            Mount {
                host_path: info.clone(),
                container_path: "/etc/podinfo".into(),
                read_only: true,
                propagation: Propagation::Private,
            },
            Mount {
                host_path: made.clone(),
                container_path: "/host".into(),
                read_only: false,
                propagation: Propagation::Private,
            },
        ]
    );
    assert!(scratch.join("cache").is_dir());
    assert!(made.is_dir());
    assert_eq!(
        std::fs::read_to_string(info.join("labels")).unwrap(),
        "app=\"web\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(info.join("meta/name")).unwrap(),
        "p"
    );
    // No limits: a container's limit reads as what the node can allocate, as in env.
    assert_eq!(
        std::fs::read_to_string(info.join("cpu_limit")).unwrap(),
        "4"
    );
    assert_eq!(
        std::fs::read_to_string(info.join("mem_limit")).unwrap(),
        "8192"
    );
    let mode = std::fs::metadata(info.join("meta/name"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    v.tear_down("u").await;
    assert!(!root.path().join("u").exists());
    assert!(made.is_dir(), "a hostPath is the node's and stays");

    v.set_up(&p).await.unwrap();
    v.remove_orphans(&HashSet::new()).await;
    assert!(!root.path().join("u").exists(), "an orphan's volumes go");
}

/// A missing ConfigMap or Secret fails the mount (naming it) unless optional; an
/// unsupported source says so; a hostPath of the wrong type is refused.
/// A pod's `fsGroup` owns its volumes as the kubelet gives them: the emptyDir group-owned,
/// group-writable and set-group-ID (so what the containers write stays in the group), the
/// downward API's files group-readable. Needs root (to give files away); skipped without.
#[tokio::test]
async fn the_fs_group_owns_the_volumes() {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: giving files to another group needs root");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let p = pod(serde_json::json!({
        "securityContext": {"fsGroup": 2345},
        "containers": [{"name": "c", "image": "i"}],
        "volumes": [{"name": "scratch", "emptyDir": {}},
                    {"name": "info", "downwardAPI": {"items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}));
    let v = volumes(root.path());
    v.set_up(&p).await.unwrap();
    let vols = root.path().join("u/volumes");
    let scratch = std::fs::metadata(vols.join("kubernetes.io~empty-dir/scratch")).unwrap();
    assert_eq!(scratch.gid(), 2345);
    assert_eq!(scratch.permissions().mode() & 0o7777, 0o2777);
    let name = std::fs::metadata(vols.join("kubernetes.io~downward-api/info/name")).unwrap();
    assert_eq!(name.gid(), 2345);
    assert_eq!(name.permissions().mode() & 0o777, 0o644 | 0o440);
}

/// `subPathExpr` expands from the container's environment (a per-pod directory in a shared
/// volume, as StatefulSets use it); an expansion that climbs out of the volume is refused.
/// `mountPropagation` reaches the mount.
#[tokio::test]
async fn sub_path_expressions_expand_from_the_environment() {
    let root = tempfile::tempdir().unwrap();
    let p = pod(serde_json::json!({
        "containers": [{"name": "c", "image": "i", "volumeMounts": [
            {"name": "scratch", "mountPath": "/logs", "subPathExpr": "logs/$(POD_NAME)",
             "mountPropagation": "HostToContainer"}]}],
        "volumes": [{"name": "scratch", "emptyDir": {}}]}));
    let v = volumes(root.path());
    v.set_up(&p).await.unwrap();
    let env = [("POD_NAME".to_owned(), "web-0".to_owned())];
    let mounts = v.mounts(&p, &p.spec.containers[0], &env).unwrap();
    let dir = root
        .path()
        .join("u/volumes/kubernetes.io~empty-dir/scratch/logs/web-0");
    assert_eq!(mounts[0].host_path, dir);
    assert_eq!(mounts[0].propagation, Propagation::HostToContainer);
    assert!(dir.is_dir());
    let up = [("POD_NAME".to_owned(), "../../../etc".to_owned())];
    let e = v.mounts(&p, &p.spec.containers[0], &up).unwrap_err();
    assert_eq!(
        e,
        "subPathExpr \"logs/$(POD_NAME)\" of volume \"scratch\" expands to \"logs/../../../etc\", which must not contain '..'"
    );
}

#[tokio::test]
async fn what_cannot_be_mounted_is_named() {
    let root = tempfile::tempdir().unwrap();
    let v = volumes(root.path());
    let one = |volume: serde_json::Value| {
        pod(serde_json::json!({"containers": [{"name": "c", "image": "i"}], "volumes": [volume]}))
    };
    let err = v
        .set_up(&one(
            serde_json::json!({"name": "conf", "configMap": {"name": "app"}}),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"conf\" : configmap \"app\" not found"
    );
    v.set_up(&one(
        serde_json::json!({"name": "conf", "configMap": {"name": "app", "optional": true}}),
    ))
    .await
    .unwrap();
    let err = v
        .set_up(&one(
            serde_json::json!({"name": "creds", "secret": {"secretName": "db"}}),
        ))
        .await
        .unwrap_err();
    assert!(err.why.contains("secret \"db\" not found"), "{err}");
    let err = v
        .set_up(&one(
            serde_json::json!({"name": "share", "nfs": {"server": "s", "path": "/"}}),
        ))
        .await
        .unwrap_err();
    assert!(
        err.why.contains("volume type nfs is not supported"),
        "{err}"
    );
    let file = root.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = v
        .set_up(&one(serde_json::json!({"name": "h", "hostPath": {"path": file.to_str().unwrap(), "type": "Directory"}})))
        .await
        .unwrap_err();
    assert!(err.why.contains("is not a directory"), "{err}");
}

/// Keys become files (all, or the listed items with their modes); a listed key that is
/// missing fails unless the source is optional.
#[test]
fn keys_become_files() {
    let data = BTreeMap::from([
        ("a".to_string(), b"1".to_vec()),
        ("b".to_string(), b"2".to_vec()),
    ]);
    let all = keys(&data, &[], Some(0o640), false, "configmap").unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["a"].mode, 0o640);
    let items = [KeyToPath {
        key: "b".into(),
        path: "dir/b.txt".into(),
        mode: Some(0o400),
    }];
    let some = keys(&data, &items, None, false, "configmap").unwrap();
    assert_eq!(some.keys().collect::<Vec<_>>(), ["dir/b.txt"]);
    assert_eq!(some["dir/b.txt"].mode, 0o400);
    let missing = [KeyToPath {
        key: "c".into(),
        path: "c".into(),
        mode: None,
    }];
    assert_eq!(
        keys(&data, &missing, None, false, "configmap").unwrap_err(),
        "configmap references non-existent config key: c"
    );
    assert!(
        keys(&data, &missing, None, true, "secret")
            .unwrap()
            .is_empty()
    );
}

/// A token is renewed once 80% of its life has passed, and after a day at most.
#[test]
fn tokens_are_renewed_before_they_expire() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let hour = Token {
        token: "t".into(),
        issued: t0,
        expires: t0 + Duration::from_secs(3600),
    };
    assert!(hour.fresh(t0 + Duration::from_secs(2879)));
    assert!(!hour.fresh(t0 + Duration::from_secs(2880)));
    let year = Token {
        token: "t".into(),
        issued: t0,
        expires: t0 + Duration::from_secs(365 * 86400),
    };
    assert!(!year.fresh(t0 + Duration::from_secs(86400)));
}

/// A pod on the pod network is named in its /etc/hosts, fully qualified with a subdomain.
#[tokio::test]
async fn the_hosts_file_names_the_pod() {
    let root = tempfile::tempdir().unwrap();
    let mut p = pod(serde_json::json!({"hostname": "db-0", "subdomain": "db",
        "containers": [{"name": "c", "image": "i"}]}));
    p.metadata.namespace = "shop".into();
    let m = volumes(root.path())
        .hosts_file(&p, "10.244.1.5", "cluster.local")
        .await
        .unwrap();
    assert_eq!(m.container_path, "/etc/hosts");
    let text = std::fs::read_to_string(&m.host_path).unwrap();
    assert!(text.contains("127.0.0.1\tlocalhost\n"), "{text}");
    assert!(
        text.ends_with("10.244.1.5\tdb-0.db.shop.svc.cluster.local\tdb-0\n"),
        "{text}"
    );
}
