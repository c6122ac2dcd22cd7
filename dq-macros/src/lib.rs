//! `#[delayed_job]`: turns an async handler into a typed, registered dq job.
//!
//! Stub until the framework issue; the attribute currently passes the item through unchanged.

use proc_macro::TokenStream;

/// Marks an async fn as a dq job handler (stub: passes the item through unchanged).
#[proc_macro_attribute]
pub fn delayed_job(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
