//! Compiles the stress test's contract (`tests/pairing_stress.machine`) to Rust with
//! `tandem_contract::codegen`, for the test's runs on `tandem_engine::dispatch`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "tests/pairing_stress.machine";
    println!("cargo:rerun-if-changed={file}");
    let code = tandem_contract::codegen::generate_file(file)?;
    std::fs::write(std::path::Path::new(&std::env::var("OUT_DIR")?).join("pairing_stress_contract.rs"), code)?;
    Ok(())
}
