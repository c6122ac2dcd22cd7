//! A log a test can read back: [`CapturedLog::install`] sets a tracing subscriber that writes
//! to it for the current thread, then the test looks at what was written.

use std::sync::{Arc, Mutex};

/// The lines a test's tracing subscriber wrote, shared between the writer and the test.
#[derive(Clone, Debug, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Captures what is logged at `level` and above on the current thread (a current-thread
    /// runtime's tasks included) until the returned guard drops.
    pub fn install(
        level: tracing_subscriber::filter::LevelFilter,
    ) -> (CapturedLog, tracing::subscriber::DefaultGuard) {
        let log = CapturedLog::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish();
        (log, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
