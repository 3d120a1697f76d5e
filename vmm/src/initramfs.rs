//! Placeholder: being written.
pub fn command(_args: &crate::cli::InitramfsArgs) -> crate::Result<()> {
    Err(crate::Error::Usage("initramfs: not built yet".into()))
}
