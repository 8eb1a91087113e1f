//! The simulated runtime against its command table.

use super::*;

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn sh(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

#[test]
fn servers_run_and_utilities_finish() {
    let server = Plan::parse(&words("httpd -f -p 8080 -h /tmp"), false);
    assert_eq!(server.run_for, None);
    let init = Plan::parse(
        &sh("mkdir -p /tmp/www && echo ok > /tmp/www/index.html"),
        false,
    );
    assert_eq!(init.run_for, Some(Duration::ZERO));
    assert_eq!(init.exit_code, 0);
}

#[test]
fn plans_read_like_the_shell() {
    assert_eq!(Plan::parse(&[], false).run_for, None);
    assert_eq!(Plan::parse(&words("sleep infinity"), false).run_for, None);
    let p = Plan::parse(&sh("echo hi; sleep 2; sleep 0.5; exit 3"), false);
    assert_eq!(p.run_for, Some(Duration::from_millis(2500)));
    assert_eq!(p.exit_code, 3);
    assert_eq!(p.lines, vec!["hi".to_string()]);
    assert_eq!(Plan::parse(&words("false"), false).exit_code, 1);
    assert!(Plan::parse(&sh("trap '' TERM; sleep 100"), false).ignore_term);
    assert!(Plan::parse(&words("tail /dev/zero"), true).oom);
    assert_eq!(Plan::parse(&words("tail /dev/zero"), false).run_for, None);
}

#[test]
fn exec_sees_files() {
    let mut files = BTreeSet::new();
    let status = |files: &mut BTreeSet<String>, command: Vec<String>| exec_in(files, &command).0;
    assert_eq!(status(&mut files, words("cat /tmp/ready")), 1);
    assert_eq!(status(&mut files, sh("touch /tmp/ready")), 0);
    assert_eq!(status(&mut files, words("test -e /tmp/ready")), 0);
    assert_eq!(status(&mut files, words("rm -f /tmp/ready")), 0);
    assert_eq!(status(&mut files, words("ls /tmp/ready")), 1);
    assert_eq!(status(&mut files, words("exit 4")), 4);
    assert_eq!(
        exec_in(
            &mut files,
            &sh("echo 'hello world'; nope; exit 3; echo unseen")
        ),
        (3, b"hello world\nsh: nope: not found\n".to_vec())
    );
}

async fn running(rt: &SimRuntime, command: Vec<String>) -> (Sandbox, String) {
    let sb = rt
        .run_sandbox(&SandboxSpec {
            node: "n".into(),
            pod_uid: "u".into(),
            ..SandboxSpec::default()
        })
        .await
        .unwrap();
    let spec = ContainerSpec {
        pod_uid: "u".into(),
        name: "c".into(),
        image: "img:1".into(),
        command,
        ports: vec![80],
        ..ContainerSpec::default()
    };
    let id = rt.create_container(&sb, &spec).await.unwrap();
    rt.start_container(&id).await.unwrap();
    (sb, id)
}

#[tokio::test(start_paused = true)]
async fn a_container_exits_on_its_planned_clock() {
    let rt = SimRuntime::new(SimConfig::default());
    let (_, id) = running(&rt, sh("sleep 30; exit 2")).await;
    let t0 = Instant::now();
    let exit = rt.wait_container(&id).await.unwrap();
    assert_eq!(exit.exit_code, 2);
    assert_eq!(exit.reason, "Error");
    assert_eq!(Instant::now() - t0, Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn stop_honours_sigterm_or_kills_after_the_grace() {
    let rt = SimRuntime::new(SimConfig::default());
    let (sb, id) = running(&rt, vec![]).await;
    assert!(
        rt.tcp_probe(&sb.ip, 80, Duration::from_secs(1))
            .await
            .unwrap()
    );
    assert!(
        !rt.tcp_probe(&sb.ip, 81, Duration::from_secs(1))
            .await
            .unwrap()
    );
    rt.stop_container(&id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(rt.wait_container(&id).await.unwrap().exit_code, 143);

    let (_, stubborn) = running(&rt, sh("trap '' TERM; sleep 1000")).await;
    let t0 = Instant::now();
    rt.stop_container(&stubborn, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(Instant::now() - t0, Duration::from_secs(5));
    assert_eq!(rt.wait_container(&stubborn).await.unwrap().exit_code, 137);
}

#[tokio::test(start_paused = true)]
async fn absent_images_fail_and_logs_are_cri_formatted() {
    let rt = SimRuntime::new(SimConfig::default());
    let (sb, id) = running(&rt, sh("echo hello world")).await;
    let log = String::from_utf8(rt.logs(&id, None).await.unwrap()).unwrap();
    assert!(log.ends_with(" stdout F hello world\n"), "{log}");
    let err = rt
        .create_container(
            &sb,
            &ContainerSpec {
                image: "localhost/x:absent".into(),
                ..ContainerSpec::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ImageNotFound { .. }));
}

/// Pod IPs come from the node's block as CNI's host-local IPAM gives them: the lowest free
/// address past the gateway, freed with its sandbox, and a full block fails the sandbox.
#[tokio::test(start_paused = true)]
async fn pod_ips_come_from_the_nodes_block() {
    let rt = SimRuntime::new(SimConfig::default());
    let run = |node: &'static str, uid: &'static str, cidr: &'static str| {
        let rt = rt.clone();
        async move {
            rt.run_sandbox(&SandboxSpec {
                node: node.into(),
                pod_uid: uid.into(),
                pod_cidr: cidr.into(),
                ..SandboxSpec::default()
            })
            .await
        }
    };
    let block = "10.244.3.0/24";
    let a = run("n1", "a", block).await.unwrap();
    let b = run("n1", "b", block).await.unwrap();
    let c = run("n1", "c", block).await.unwrap();
    assert_eq!(
        [a.ip.as_str(), b.ip.as_str(), c.ip.as_str()],
        ["10.244.3.2", "10.244.3.3", "10.244.3.4"]
    );
    // Another node's block is its own.
    let other = run("n2", "d", "10.244.4.0/24").await.unwrap();
    assert_eq!(other.ip, "10.244.4.2");
    // A removed sandbox's address is given again.
    rt.remove_sandbox(&b.id).await.unwrap();
    assert_eq!(run("n1", "e", block).await.unwrap().ip, "10.244.3.3");
    // A /30 holds one pod address.
    run("n3", "f", "10.244.5.0/30").await.unwrap();
    let full = run("n3", "g", "10.244.5.0/30").await.unwrap_err();
    assert!(
        full.to_string().contains("no IP addresses available"),
        "{full}"
    );
}

/// What one node or one sandbox holds is found through its own ids: each node lists its own
/// sandboxes, each sandbox its own containers, and a removed container or sandbox (with its
/// containers) is gone from every list and from the runtime's counts.
#[tokio::test(start_paused = true)]
async fn nodes_and_sandboxes_list_only_their_own() {
    let rt = SimRuntime::new(SimConfig::default());
    let mut made = Vec::new();
    for (node, uid) in [("n1", "a"), ("n1", "b"), ("n2", "c")] {
        let sb = rt
            .run_sandbox(&SandboxSpec {
                node: node.into(),
                pod_uid: uid.into(),
                ..SandboxSpec::default()
            })
            .await
            .unwrap();
        let mut ids = Vec::new();
        for name in ["x", "y"] {
            let spec = ContainerSpec {
                pod_uid: uid.into(),
                name: name.into(),
                image: "img:1".into(),
                ..ContainerSpec::default()
            };
            ids.push(rt.create_container(&sb, &spec).await.unwrap());
        }
        made.push((sb, ids));
    }
    let uids = |sbs: Vec<Sandbox>| {
        let mut u: Vec<String> = sbs.into_iter().map(|s| s.pod_uid).collect();
        u.sort();
        u
    };
    assert_eq!(uids(rt.list_sandboxes("n1").await.unwrap()), ["a", "b"]);
    assert_eq!(uids(rt.list_sandboxes("n2").await.unwrap()), ["c"]);
    assert!(rt.list_sandboxes("n3").await.unwrap().is_empty());
    let (a, a_ids) = &made[0];
    let mut listed: Vec<String> = rt
        .list_containers(&a.id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    listed.sort();
    let mut want = a_ids.clone();
    want.sort();
    assert_eq!(listed, want);
    rt.remove_container(&a_ids[0]).await.unwrap();
    assert_eq!(rt.list_containers(&a.id).await.unwrap().len(), 1);
    rt.remove_sandbox(&a.id).await.unwrap();
    assert!(rt.list_containers(&a.id).await.unwrap().is_empty());
    assert_eq!(uids(rt.list_sandboxes("n1").await.unwrap()), ["b"]);
    assert_eq!(rt.counts(), (2, 4), "b's and c's sandboxes and containers");
}
