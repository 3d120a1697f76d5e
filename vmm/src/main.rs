use clap::Parser as _;

fn main() {
    // A closed stdout (`xvmm | head`) ends xvmm quietly, as for any Unix tool,
    // instead of a panic in print!. Result files are written before any table.
    // SAFETY: restoring a default signal disposition at start-up.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = match xvmm::app::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, like every other xvmm error; --help has the details.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("xvmm: usage: {first} (see xvmm --help)");
            std::process::exit(2);
        }
    };
    if let Err(err) = xvmm::app::run(cli) {
        eprintln!("xvmm: {err}");
        std::process::exit(err.exit_code());
    }
}
