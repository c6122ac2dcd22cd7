//! The private cluster: it comes up healthy (3 masters, 3 replicas, every slot served), routes
//! keys across its masters, lists a namespace over every master, and dies with its handle.

use std::collections::BTreeSet;
use std::path::Path;

use dq_testkit::{CLUSTER_MASTERS, CLUSTER_NODES, NodeRole, RedisCluster};

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_cluster_comes_up_healthy_and_dies_with_its_handle() {
    let cluster = RedisCluster::start();
    let infos = cluster.node_infos();
    assert_eq!(infos.len(), CLUSTER_NODES);
    let roles: Vec<NodeRole> = infos.iter().map(|n| n.role).collect();
    assert_eq!(
        roles.iter().filter(|r| **r == NodeRole::Master).count(),
        CLUSTER_MASTERS,
        "{infos:?}"
    );
    assert_eq!(
        roles.iter().filter(|r| **r == NodeRole::Replica).count(),
        CLUSTER_MASTERS,
        "{infos:?}"
    );
    let ports: BTreeSet<u16> = infos.iter().map(|n| n.port).collect();
    assert_eq!(ports.len(), CLUSTER_NODES, "distinct ports");
    assert!(!ports.contains(&6379));

    // The seed URL names every node.
    let url = cluster.url();
    let seeds = url.strip_prefix("redis+cluster://").expect("dq's scheme");
    let seeded: BTreeSet<u16> = seeds
        .split(',')
        .map(|s| s.strip_prefix("127.0.0.1:").unwrap().parse().unwrap())
        .collect();
    assert_eq!(seeded, ports);

    // Every node sees a healthy cluster with every slot served.
    for node in cluster.nodes() {
        let info: String = node.cmd(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_ok:16384"), "{info}");
    }

    // Keys spread over the masters through a cluster connection, and the namespace listing
    // finds them on every master.
    let ns = dq_testkit::namespace("cluster");
    let keys: Vec<String> = (0..30).map(|i| format!("{ns}:{{t#{i}}}:k")).collect();
    for k in &keys {
        cluster.cmd::<()>(&["SET", k.as_str(), "v"]);
    }
    let used: BTreeSet<u16> = keys
        .iter()
        .map(|k| {
            let slot: u16 = cluster.cmd(&["CLUSTER", "KEYSLOT", k.as_str()]);
            cluster.master_of_slot(slot).expect("slot served").port()
        })
        .collect();
    assert_eq!(used.len(), CLUSTER_MASTERS, "30 tags use every master");
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(cluster.keys_in_namespace(&ns), expected);
    for master in cluster.masters() {
        let dbsize: i64 = master.cmd(&["DBSIZE"]);
        assert!(dbsize > 0, "master {} holds some keys", master.port());
    }

    let pids: Vec<u32> = infos.iter().map(|n| n.pid).collect();
    drop(cluster);
    for pid in pids {
        assert!(!proc_exists(pid), "node pid {pid} still exists after drop");
    }
}
