//! Generates Skiff's own gRPC services. The etcd v3 API is not generated here: the
//! `etcd-client` crate's `build-server` feature provides it, wire-exact.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/skiff/cluster/v1/cluster.proto",
        "proto/skiff/raft/v1/raft.proto",
        "proto/skiff/node/v1/logs.proto",
        "proto/skiff/node/v1/exec.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&protos, &["proto"])?;
    Ok(())
}
