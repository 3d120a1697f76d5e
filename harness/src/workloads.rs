//! The workloads the nested harness runs under `xperf workload` in L1 and
//! `xvmm --workload` in L2 (issue 38): busybox shell scripts, with Debian's
//! static busybox put at [`BUSYBOX`] in L1 and, by xvmm, in L2. Applets are
//! named by path (L2's shell has no PATH to them) and no script holds a
//! double quote (the kernel command line cannot carry one).

/// Where busybox is, in L1 and in L2.
pub const BUSYBOX: &str = "/workload/busybox";
/// Where the harness takes it from (`harness/setup.sh` installs
/// busybox-static).
pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// A shell that forks and execs two applets: a file read, a directory
/// listed. It lists /workload, which holds busybox alone in L1 and L2, and
/// not `/`, where the steps' files come and go (ls stats every entry).
pub const SCRIPT: &str =
    "/workload/busybox cat /proc/cpuinfo > /dev/null; /workload/busybox ls /workload > /dev/null";

/// Real work, by name.
pub const REAL: [(&str, &str); 4] = [
    (
        "fork-exec",
        "i=0; while [ $i -lt 100 ]; do /workload/busybox true; i=$((i+1)); done",
    ),
    (
        "pipe-ping-pong",
        "B=/workload/busybox; $B rm -f /pp-a /pp-b; $B mkfifo /pp-a /pp-b; \
         (exec 3</pp-a 4>/pp-b; while read -r x <&3; do echo $x >&4; done) & \
         exec 5>/pp-a 6</pp-b; i=0; while [ $i -lt 300 ]; do echo $i >&5; read -r y <&6; \
         i=$((i+1)); done; exec 5>&-; wait",
    ),
    (
        "tar-gzip",
        "B=/workload/busybox; $B rm -rf /t /t.tgz; $B mkdir -p /t/d; i=0; \
         while [ $i -lt 40 ]; do $B seq 1 3000 > /t/d/f$i; i=$((i+1)); done; \
         $B tar cf - -C /t d | $B gzip > /t.tgz",
    ),
    (
        "hash",
        "B=/workload/busybox; $B dd if=/dev/zero of=/h bs=1M count=64 2>/dev/null; \
         $B sha256sum /h > /dev/null; $B rm /h",
    ),
];

/// The system call each real workload makes at least this often, on any
/// kernel: (workload, call, least).
pub const SHAPES: [(&str, &str, u64); 4] = [
    ("fork-exec", "execve", 101),
    ("pipe-ping-pong", "write", 600),
    ("tar-gzip", "execve", 44),
    ("hash", "read", 64),
];

/// The script of real workload `name`.
pub fn script(name: &str) -> Option<&'static str> {
    REAL.iter().find(|r| r.0 == name).map(|r| r.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script fits the kernel command line as xvmm passes it: no
    /// double quote, no control character, no `--`; every shape names a
    /// workload.
    #[test]
    fn every_script_can_travel_on_a_kernel_command_line() {
        for (name, s) in REAL.iter().copied().chain([("sh", SCRIPT)]) {
            assert!(
                !s.contains('"') && !s.chars().any(char::is_control) && !s.contains("--"),
                "{name}"
            );
        }
        assert!(SHAPES.iter().all(|(name, _, _)| script(name).is_some()));
        assert_eq!(script("nothing"), None);
    }
}
