//! A replaced output file keeps its whole mode, the special bits included (README,
//! "Output files": a replaced file keeps its mode and owner). The output is written to
//! a temporary file and renamed over the old one, so every bit has to be carried over
//! by hand: setuid, setgid and sticky as much as the permission bits.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn a_replaced_output_keeps_its_setuid_setgid_and_sticky_bits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("receipt.json");
    for mode in [0o4640, 0o2640, 0o1640, 0o7640, 0o0640] {
        fs::write(&out, "old\n").unwrap();
        fs::set_permissions(&out, fs::Permissions::from_mode(mode)).unwrap();
        // What the file system kept (an unprivileged user may not set setgid).
        let before = fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        let status = Command::new(env!("CARGO_BIN_EXE_kvroute"))
            .args([
                "replay",
                "../fixtures/lab/trace.json",
                "--format",
                "json",
                "--out",
            ])
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "mode {mode:04o}");
        assert_ne!(fs::read(&out).unwrap(), b"old\n", "mode {mode:04o}");
        let after = fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            after, before,
            "mode {mode:04o}: {after:04o} after, {before:04o} before"
        );
    }
}
