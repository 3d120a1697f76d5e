//! Placeholder: being written.
pub fn build_command(_args: &crate::cli::KernelBuildArgs) -> crate::Result<()> {
    Err(crate::Error::Usage("kernel build: not built yet".into()))
}
