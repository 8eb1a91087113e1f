//! `skiff validate` through the real binary: the shipped examples are accepted, and each bad
//! manifest is refused with its own precise error (file, document, field path) and nothing
//! reported as created.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn skiff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run skiff")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every example decodes, defaults and validates; the table lists each object once.
#[test]
fn examples_are_valid() {
    let out = skiff(&["validate", "-f", "examples"]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    for object in [
        "pod/hello",
        "pod/web",
        "pod/cache-0",
        "pod/cache-1",
        "priorityclass/cache",
        "node/node-1",
        "namespace/team-a",
        "resourcequota/compute",
        "limitrange/container-defaults",
        "deployment/hello-app",
        "service/hello-app",
    ] {
        assert_eq!(
            stdout.matches(&format!(" {object} ")).count(),
            1,
            "{object} in\n{stdout}"
        );
    }
    assert!(
        stdout.contains("requests cpu=500m memory=128Mi"),
        "{stdout}"
    );
    assert!(stdout.contains("11 objects valid"), "{stdout}");
}

/// `-o yaml` prints the defaulted objects, and that output is itself a valid manifest that
/// decodes to the same objects (decode → encode → decode is identity).
#[test]
fn yaml_output_round_trips() {
    let first = skiff(&["validate", "-f", "examples", "-o", "yaml"]);
    assert!(first.status.success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["validate", "-f", "-", "-o", "yaml"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&first.stdout)
        .expect("write");
    let second = child.wait_with_output().expect("wait");
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), text(&first.stdout));
    assert!(text(&first.stdout).contains("schedulerName: default-scheduler"));
}

/// Each bad manifest fails with exit status 1 and exactly the expected message.
#[test]
fn bad_manifests_are_refused_precisely() {
    let dir = "skiff/tests/manifests/bad";
    let cases: &[(&str, &[&str])] = &[
        (
            "bad-quantity.yaml",
            &[
                "bad-quantity.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid quantity \"abc\"",
            ],
        ),
        (
            "unknown-kind.yaml",
            &[
                "unknown-kind.yaml: document 1: kind: unknown kind \"Widget\" (apiVersion \"example.com/v1\")",
            ],
        ),
        (
            "unknown-field.yaml",
            &["unknown-field.yaml: document 1: spec.containers[0].comand: unknown field"],
        ),
        (
            "request-over-limit.yaml",
            &[
                "request-over-limit.yaml: document 1: spec.containers[0].resources.requests.memory: invalid value 1Gi: must be less than or equal to memory limit of 512Mi",
            ],
        ),
        (
            "second-document.yaml",
            &[
                "second-document.yaml: document 2: metadata.name: invalid value \"Bad_Name\"",
                "second-document.yaml: document 2: spec.terminationGracePeriodSeconds: invalid value -1",
            ],
        ),
        (
            "bad-restart-policy.yaml",
            &[
                "bad-restart-policy.yaml: document 1: spec.restartPolicy: unsupported value \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ],
        ),
        (
            "wrong-type.yaml",
            &[
                "wrong-type.yaml: document 1: spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\", expected i32",
            ],
        ),
        (
            "bad-taint.yaml",
            &["bad-taint.yaml: document 1: spec.taints[0].effect: unsupported value \"NoSchedul\""],
        ),
        (
            "not-yaml.yaml",
            &["not-yaml.yaml: document 1: not valid YAML or JSON"],
        ),
    ];
    for (file, want) in cases {
        let path = format!("{dir}/{file}");
        let out = skiff(&["validate", "-f", &path]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{file}: nothing may be reported as created: {}",
            text(&out.stdout)
        );
        for w in *want {
            assert!(
                stderr.contains(&format!("{dir}/{w}")),
                "{file}: want {w:?} in:\n{stderr}"
            );
        }
        assert!(stderr.contains("nothing would be created"), "{stderr}");
    }
}

/// Valid and invalid files together: the whole run fails and every error is listed.
#[test]
fn one_bad_file_fails_the_whole_run() {
    let out = skiff(&[
        "validate",
        "-f",
        "examples",
        "-f",
        "skiff/tests/manifests/bad",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("10 errors: nothing would be created"),
        "{stderr}"
    );
}

#[test]
fn missing_files_are_named() {
    let out = skiff(&["validate", "-f", "no/such/file.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no/such/file.yaml: cannot read: No such file or directory"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn version_and_help() {
    let out = skiff(&["version"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with(&format!("skiff {}", env!("CARGO_PKG_VERSION"))));
    let out = skiff(&["--help"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("validate"));
}
