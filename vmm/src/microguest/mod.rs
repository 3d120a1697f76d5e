//! Placeholder: being written.
pub fn run(_args: &crate::cli::RunArgs) -> crate::Result<()> {
    Err(crate::Error::Usage("microguest: not built yet".into()))
}
