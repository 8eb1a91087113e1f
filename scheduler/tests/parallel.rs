//! Parallel workers against one committer, under random cluster events (nodes leaving and
//! coming back, placed pods deleted): no node is ever overcommitted, no pod is placed twice,
//! required anti-affinity holds, and the table's columns equal a recount of its pods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use skiff_scheduler::engine::Rng;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::model::{NodeInfo, PodInfo, term_namespaces, term_selects};
use skiff_scheduler::parallel::{Core, Pool, PoolConfig, Verdict};
use skiff_scheduler::synth::{self, Profile};
use skiff_scheduler::table::NodeTable;

/// Every invariant the committer promises, checked from scratch.
fn check_table(t: &NodeTable) {
    for row in 0..t.len() {
        let on = t.pods_on(row);
        let pods: Vec<&PodInfo> = on.iter().map(|e| e.info.as_ref()).collect();
        let cpu: i64 = pods.iter().map(|p| p.requests.milli_cpu).sum();
        let mem: i64 = pods.iter().map(|p| p.requests.memory).sum();
        assert_eq!(t.req_cpu[row], cpu, "cpu column of {}", t.names[row]);
        assert_eq!(t.req_mem[row], mem, "memory column of {}", t.names[row]);
        assert_eq!(t.req_pods[row], pods.len() as i64);
        assert!(
            cpu <= t.alloc_cpu[row],
            "{} overcommitted: cpu {cpu}",
            t.names[row]
        );
        assert!(
            mem <= t.alloc_mem[row],
            "{} overcommitted: memory {mem}",
            t.names[row]
        );
        assert!(pods.len() as i64 <= t.alloc_pods[row]);
    }
    // Every term counts what a fresh count over the placed pods finds.
    for term in &t.terms {
        let fresh = t
            .count_term(term.key.clone(), term.selector.as_ref())
            .expect("a registered term has its column");
        assert_eq!(term.per_node, fresh.per_node, "{:?} per node", term.key);
        assert_eq!(term.total, fresh.total, "{:?} in all", term.key);
    }
    // Required anti-affinity: no selected pod shares the owner's domain.
    let placed = t.pods();
    for (key, e) in &placed {
        let Some(row) = t.row(&e.node) else { continue };
        for term in &e.info.required_anti_affinity {
            let ns = term_namespaces(term, &e.info.namespace);
            let Some(dom) = t.infos[row].labels.get(&term.topology_key) else {
                continue;
            };
            for (other_key, o) in &placed {
                if other_key == key {
                    continue;
                }
                let Some(orow) = t.row(&o.node) else { continue };
                let same = t.infos[orow].labels.get(&term.topology_key) == Some(dom);
                assert!(
                    !(same
                        && term_selects(
                            term.label_selector.as_ref(),
                            &ns,
                            &o.info.namespace,
                            &o.info.labels
                        )),
                    "{key} and {other_key} violate anti-affinity on {}",
                    term.topology_key
                );
            }
        }
    }
}

fn wait_idle(core: &Core, deadline: Duration) {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        let (active, in_flight, _) = core.queue.depth();
        if active == 0 && in_flight == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("queue not drained: {:?}", core.queue.depth());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn workers_never_overcommit_or_double_place(
        seed in any::<u64>(),
        nodes in 3usize..24,
        pods in 20usize..400,
        workers in 1usize..5,
        batch in 1usize..32,
        events in prop::collection::vec((0u8..3, any::<u64>()), 0..12),
    ) {
        let core = Arc::new(Core::new(Kernels::auto()));
        let (node_objs, pod_objs) = synth::workload(nodes, pods, Profile::Mixed, seed);
        {
            let mut t = core.table.write();
            for n in &node_objs {
                t.upsert_node(NodeInfo::from_node(n));
            }
        }
        let placed: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let doubles: Arc<Mutex<Vec<String>>> = Arc::default();
        let (p2, d2) = (placed.clone(), doubles.clone());
        let pool = Pool::start_shared(core.clone(), PoolConfig { workers, batch, seed }, move |vs| {
            let mut p = p2.lock().unwrap();
            for v in vs {
                if let Verdict::Placed { pod, node, .. } = v
                    && p.insert(pod.key(), node).is_some() {
                        d2.lock().unwrap().push(pod.key());
                    }
            }
        });
        for p in &pod_objs {
            core.queue.add(Arc::new(PodInfo::from_pod(p)));
        }
        let mut rng = Rng::new(seed);
        let mut removed: HashSet<String> = HashSet::new();
        for (kind, pick) in events {
            let mut t = core.table.write();
            match kind {
                0 if t.len() > 1 => {
                    let name = t.names[(pick % t.len() as u64) as usize].to_string();
                    t.remove_node(&name);
                    removed.insert(name);
                }
                1 => {
                    if let Some(name) = removed.iter().next().cloned() {
                        let i: usize = name.trim_start_matches("node-").parse().unwrap();
                        t.upsert_node(NodeInfo::from_node(&node_objs[i]));
                        removed.remove(&name);
                    }
                }
                _ => {
                    // A placed pod finishes: it leaves the table and may be queued no more.
                    let keys: Vec<String> =
                        t.pods().into_iter().map(|(k, _)| k.to_string()).collect();
                    if !keys.is_empty() {
                        let k = &keys[rng.below(keys.len())];
                        t.remove_pod(k);
                        placed.lock().unwrap().remove(k);
                    }
                }
            }
            drop(t);
            core.queue.cluster_changed();
            // The upgradable read waits out a commit in progress: under a plain read, the
            // index may show its claims before the columns count them.
            check_table(&core.table.upgradable_read());
        }
        wait_idle(&core, Duration::from_secs(30));
        core.queue.close();
        pool.join();
        prop_assert!(doubles.lock().unwrap().is_empty(), "placed twice: {:?}", doubles.lock().unwrap());
        check_table(&core.table.read());
    }
}
