// libmsquic.so.2 is installed beside the binary (scripts/setup.sh), so the
// binary looks for it there.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN");
}
