//! How the command line fails: every error carries the exit code a script can branch on
//! (listed in `dq --help`), and dq's own errors are sorted into those codes here, in one place.

use std::fmt;
use std::process::ExitCode;

/// The exit codes, as documented in `dq --help` and the README.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 1: the operation failed or was refused.
    Failed = 1,
    /// 2: bad input; nothing was written.
    BadInput = 2,
    /// 3: no such job or topic.
    NotFound = 3,
    /// 4: Redis could not be reached.
    Connection = 4,
    /// 5: the operator declined at the confirmation prompt.
    Aborted = 5,
}

/// An error to print and exit with.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub exit: Exit,
    /// What to tell the operator.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(exit: Exit, message: impl Into<String>) -> Failure {
        Failure {
            exit,
            message: message.into(),
        }
    }

    /// The process exit code.
    pub fn code(&self) -> ExitCode {
        ExitCode::from(self.exit as u8)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<dq_core::Error> for Failure {
    fn from(e: dq_core::Error) -> Failure {
        use dq_core::Error as E;
        let exit = match &e {
            E::InvalidTopic { .. }
            | E::InvalidKey { .. }
            | E::PayloadTooLarge { .. }
            | E::Encode(_)
            | E::InvalidConfig(_)
            | E::InvalidExpiry(_)
            | E::InvalidPriority(_)
            | E::InvalidGroup { .. }
            | E::InvalidWindow(_)
            | E::DelayTooLong { .. }
            | E::DueOutOfRange { .. }
            | E::InvalidPartition { .. }
            | E::TopicMismatch { .. }
            | E::InvalidBatch { .. }
            | E::BulkItem { .. } => Exit::BadInput,
            E::BatchNotFound(_) => Exit::NotFound,
            E::Timeout(_) | E::Tls(_) => Exit::Connection,
            E::Redis(r)
                if r.is_io_error()
                    || r.is_connection_refusal()
                    || r.is_connection_dropped()
                    || r.is_timeout() =>
            {
                Exit::Connection
            }
            _ => Exit::Failed,
        };
        Failure::new(exit, e.to_string())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Failure {
        Failure::new(Exit::Failed, format!("cannot write JSON: {e}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::new(Exit::Failed, format!("I/O error: {e}"))
    }
}

/// The result of a command.
pub type Outcome<T = ()> = Result<T, Failure>;
