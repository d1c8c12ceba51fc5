//! Compiles the contracts of the services that run on `tandem_engine::dispatch` to Rust
//! (`tandem_contract::codegen`): `$OUT_DIR/dating_contract.rs`, included by `dating.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "../../services/dating.machine";
    println!("cargo:rerun-if-changed={file}");
    let code = tandem_contract::codegen::generate_file(file)?;
    std::fs::write(std::path::Path::new(&std::env::var("OUT_DIR")?).join("dating_contract.rs"), code)?;
    Ok(())
}
