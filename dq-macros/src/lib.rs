//! `#[delayed_job]`: turns a handler fn into a typed, registered dq job.
//!
//! - `lib.rs` (this file): the entry point, and the one place errors become `compile_error!`.
//! - `args.rs`: parses the arguments and checks the signature, with errors on the token at fault.
//! - `expand.rs`: all the generated code.
//!
//! This crate knows dq only by paths (`::dq::__private::…`), never by its types. Use it through
//! the `dq` facade, which documents the attribute.

use proc_macro::TokenStream;
use quote::ToTokens;

mod args;
mod expand;

/// The retry and duration syntax: the crate dq-core parses the same text with at run time, so
/// what the attribute accepts at compile time is exactly what dq-core accepts.
use dq_syntax as retry_syntax;

/// Makes a fn a dq job handler: registers it for the worker and adds a same-named type that
/// names the job for producers (`client.enqueue::<close_order>(…)`).
///
/// ```ignore
/// #[derive(Serialize, Deserialize)]
/// struct CloseOrder { order_id: u64 }
///
/// #[dq::delayed_job(topic = "orders.close", retry = "15s, 3m, 10m", timeout = "30s", concurrency = 16)]
/// async fn close_order(order: CloseOrder, ctx: dq::JobContext) -> Result<(), dq::JobError> {
///     Ok(())
/// }
/// ```
///
/// # The handler
///
/// - Its first parameter is the payload: any owned `Serialize + Deserialize` type, stored as
///   MessagePack with struct fields by name (`dq::payload`), so a job enqueued before a deploy
///   decodes by serde's rules after it: reordered fields, a field added with
///   `#[serde(default)]`, a removed field and a field renamed with `#[serde(alias = "old")]`
///   all decode. A payload that no longer fits the type is never mis-decoded: the handler is
///   not called and the job goes to the dead queue at once (no retry), its error naming the
///   type and the field (``undecodable payload: does not fit app::CloseOrder: missing field
///   `user_id` ``); requeue it once a fixed version runs.
/// - An optional second parameter receives the job's `dq::JobContext`.
/// - It returns `Result<T, E>` for any `E` that converts into `dq::JobError` (`JobError`
///   itself, `std::io::Error`, `String`, `Box<dyn Error + Send + Sync>`, …). A plain error is
///   retried on the job's policy; `JobError` says otherwise (permanent, retry after, defer).
///   `T` is `()` or any `serde::Serialize` value: it is kept with the succeeded job while the
///   topic keeps succeeded jobs (`keep_succeeded`), and read back typed with
///   `client.result::<close_order>(key)` or `client.wait::<close_order>(key, timeout)`.
/// - An `async fn` runs on the worker's runtime. A plain `fn` runs on tokio's blocking pool,
///   and a panic there is a retryable error; a timeout or a lost lease cannot stop a thread, so
///   a long blocking handler should check `ctx.is_cancelled()` now and then.
/// - It cannot be generic or take `self`.
///
/// # Arguments
///
/// | argument | default | |
/// |---|---|---|
/// | `topic = "orders.close"` | the fn's name | 1–128 characters of `[A-Za-z0-9._-]` |
/// | `retry = "15s, 3m, 10m"` | `"15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h"` | also `"none"`, `"fixed(1s, 5)"`, `"exponential(1s, 1h, 10)"` (initial, max, retries) |
/// | `timeout = "30s"` | none | units `ms`, `s`, `m`, `h`, `d` |
/// | `expires_after = "10m"` | none | a job enqueued through the typed client without an expiry of its own is dropped, never started, if it has not started this long after its due time (`dq::Expiry`) |
/// | `unique_for = "1h"`, `debounce = "5s"` or `throttle = "1m"` (one) | none | the key window a job enqueued through the typed client opens when it has none of its own (`dq::KeyWindow`: refused while its job exists and for this long after it finished; last wins, run this long after the last enqueue; first wins, later enqueues refused for this long) |
/// | `max_delay = "90d"` | none | an enqueue or reschedule of the topic due further than this from now is refused (`dq::Error::DelayTooLong`); written by every worker at start |
/// | `keep_succeeded = "1h"` | not kept | keep succeeded jobs (and their results) this long, 1 ms to 90 days (`dq::Retention`); written by every worker at start |
/// | `keep_cancelled = "1d"`, `keep_expired = "1d"` | not kept | the same for cancelled jobs and jobs that expired before they started |
/// | `keep_max = 10000` | 10,000 | most finished jobs the topic keeps, all outcomes together; beyond it the soonest to go are trimmed and counted |
/// | `events`, `events = 50000` | not recorded | record the topic's events (enqueued, started, succeeded, failed, …: `dq::Client::events`), keeping about the last 10,000 (or N, 1 to 10,000,000); written by every worker at start |
/// | `concurrency = 16` | the worker's | most jobs of this topic running at once in one worker |
/// | `data(Db, Mailer)` | none | shared data the handler takes with `ctx.data::<T>()`: a worker built without one of them fails at `build()` with `WorkerError::MissingData` |
/// | `crate = "my_crate::dq"` | `"::dq"` | where generated code finds dq, when it is re-exported |
///
/// Every argument is checked at compile time, with the error on the argument at fault.
///
/// # What it generates
///
/// The fn, unchanged; `struct close_order {}` with the fn's visibility, implementing `dq::Job`
/// (`Payload` = the payload type, `TOPIC` = the topic) and `dq::JobOutput` (`Output` = the
/// handler's `T`); and a `dq::JobDescriptor` registered
/// with the worker, which decodes the payload and calls the fn.
#[proc_macro_attribute]
pub fn delayed_job(args: TokenStream, item: TokenStream) -> TokenStream {
    delayed_job_impl(args.into(), item.into()).into()
}

fn delayed_job_impl(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    match expand(args, item.clone()) {
        Ok(tokens) => tokens,
        // Keep the user's item as written, so that the only error is ours and the editor keeps
        // resolving the fn (tokio-macros' `entry.rs` does the same).
        Err(error) => {
            let mut tokens = item;
            tokens.extend(error.into_compile_error());
            tokens
        }
    }
}

fn expand(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let args = syn::parse2::<args::Args>(args)?;
    let item = match syn::parse2::<syn::Item>(item)? {
        syn::Item::Fn(item) => item,
        other => {
            return Err(syn::Error::new_spanned(
                item_head(&other),
                "#[delayed_job] goes on a handler fn, e.g. \
                 `async fn close_order(order: CloseOrder) -> Result<(), dq::JobError>`",
            ));
        }
    };
    let handler = args::Handler::new(args, item)?;
    Ok(expand::handler(&handler))
}

/// The tokens to point at when the attribute is on something other than a fn: its keyword and
/// name (`struct CloseOrder`), not its whole body.
fn item_head(item: &syn::Item) -> proc_macro2::TokenStream {
    use syn::Item;
    let mut head = proc_macro2::TokenStream::new();
    match item {
        Item::Struct(s) => {
            s.struct_token.to_tokens(&mut head);
            s.ident.to_tokens(&mut head);
        }
        Item::Enum(e) => {
            e.enum_token.to_tokens(&mut head);
            e.ident.to_tokens(&mut head);
        }
        Item::Union(u) => {
            u.union_token.to_tokens(&mut head);
            u.ident.to_tokens(&mut head);
        }
        Item::Trait(t) => {
            t.trait_token.to_tokens(&mut head);
            t.ident.to_tokens(&mut head);
        }
        Item::Mod(m) => {
            m.mod_token.to_tokens(&mut head);
            m.ident.to_tokens(&mut head);
        }
        Item::Impl(i) => {
            i.impl_token.to_tokens(&mut head);
            i.self_ty.to_tokens(&mut head);
        }
        other => other.to_tokens(&mut head),
    }
    head
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn an_error_keeps_the_item_and_adds_one_compile_error() {
        let item = quote!(
            async fn close_order() -> Result<(), dq::JobError> {
                Ok(())
            }
        );
        let out = delayed_job_impl(quote!(retry = "15x"), item.clone()).to_string();
        assert!(out.starts_with(&item.to_string()), "{out}");
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(out.contains("unknown unit"), "{out}");
    }

    #[test]
    fn expansion_names_only_the_private_path() {
        let out = delayed_job_impl(
            quote!(
                topic = "orders.close",
                crate = "my::dq",
                data(Db, pool::Pool)
            ),
            quote!(
                pub async fn close_order(order: CloseOrder) -> Result<(), dq::JobError> {
                    Ok(())
                }
            ),
        )
        .to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("pub struct close_order { }"), "{out}");
        assert!(
            out.contains("impl my :: dq :: __private :: Job for close_order"),
            "{out}"
        );
        assert!(out.contains("type Payload = CloseOrder"), "{out}");
        assert!(
            out.contains(
                "data : & [my :: dq :: __private :: DataNeed :: of :: < Db > () , \
                 my :: dq :: __private :: DataNeed :: of :: < pool :: Pool > ()]"
            ),
            "{out}"
        );
        // Every generated path goes through the `crate` override.
        assert_eq!(
            out.matches("__private").count(),
            out.matches("my :: dq :: __private").count(),
            "{out}"
        );
        assert!(
            out.contains("retry : \"15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h\""),
            "{out}"
        );
    }
}
