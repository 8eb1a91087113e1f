//! Generates the agent's log service (`proto/skiff/node/v1/logs.proto`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/skiff/node/v1/logs.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&[proto], &["proto"])?;
    Ok(())
}
