//! satbench-tunnel: `keypair` prints a fresh WireGuard key pair as JSON
//! (`{"private": HEX, "public": HEX}`). The tunnel's I/O loop comes next.

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("keypair") => {
            let (private, public) = satbench_tunnel::keypair();
            println!(
                "{}",
                serde_json::json!({"private": private, "public": public})
            );
        }
        _ => {
            eprintln!("satbench-tunnel: usage: satbench-tunnel keypair");
            std::process::exit(2);
        }
    }
}
