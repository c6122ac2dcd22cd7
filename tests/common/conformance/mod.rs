//! The store conformance suite: what every `Store` must do, written once against [`Harness`].
//!
//! Each `pub async fn name<H: Harness>(h: &H)` is one test body, in a file of its theme
//! (`enqueue.rs`, `lease.rs`, `dead_queue.rs`, …); [`conformance_suite!`]
//! (crate::conformance_suite) turns the registration list below into `#[tokio::test]`s for one
//! store and runs the harness's invariant check after each. A body is registered by one line,
//! `module::name`, where `module` is a module of this one: a new file of bodies is one
//! `pub mod` line here (or `pub use` of a file elsewhere), then one line per body.
//!
//! The bodies use only the public API (client, `Store` trait) and compare times on the store's
//! clock (`Store::now_ms`, `Delivery::leased_ms`, `JobInfo::due_ms`); they wait for a due time
//! by polling, never by sleeping. Each file starts with `use super::*;`: the imports below are
//! shared by all.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use dq::store::{
    AckOutcome, Delivery, EnqueueCall, Extended, FailAction, FailOutcome, FetchCall, FetchReply,
    FetchRequest, NewJob, Queue,
};
use dq::{
    AttemptOutcome, CancelOutcome, DeadLimits, Due, EnqueueOutcome, Error, Job, JobInfo, JobKey,
    JobSpec, JobState, NewDue, RescheduleOutcome, RetryPolicy, Topic, TopicClient,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::Harness;

pub mod bad_input;
pub mod batches;
pub mod bury;
pub mod cancel_reschedule;
pub mod dead_queue;
pub mod dead_sweep;
pub mod due;
pub mod enqueue;
pub mod enqueue_hook;
pub mod events;
pub mod expiry;
pub mod fetch;
pub mod formats;
pub mod group_commit;
pub mod groups;
pub mod kept;
pub mod lease;
pub mod lease_retry;
pub mod limits;
pub mod priority;
pub mod progress;
pub mod receipts;
pub mod retry;
pub mod retry_fn;
pub mod schedules;
pub mod shapes;
pub mod stats;
mod support;
pub mod topics;
pub mod update;
pub mod windows;

pub use support::*;

/// Generates, for one store, a `#[tokio::test]` per conformance body and the property tests.
///
/// `$new` is an expression (it may `.await`) making a fresh harness; every test gets its own.
#[macro_export]
macro_rules! conformance_suite {
    ($new:expr) => {
        $crate::conformance_suite!(@bodies $new;
            due::due_time_is_never_early,
            due::due_jobs_come_out_in_due_order,
            enqueue::enqueue_by_key_is_idempotent,
            receipts::retried_enqueue_finds_its_receipt,
            receipts::retried_fetch_finds_its_receipt,
            enqueue::replace_swaps_pending_jobs,
            enqueue::replace_is_refused_while_running,
            enqueue::replace_revives_a_dead_job,
            cancel_reschedule::cancel_from_every_state,
            cancel_reschedule::reschedule_from_every_state,
            bury::bury_takes_a_waiting_job_from_every_state,
            bury::bury_starts_the_unique_for_window,
            bury::bury_of_a_grouped_ready_job_leaves_its_group_free,
            bury::bury_of_a_batch_member_ends_it_dead_in_its_batch,
            fetch::fetch_promotes_at_most_its_batch,
            fetch::fetch_recovers_at_most_its_batch,
            fetch::concurrent_fetchers_deliver_each_job_once,
            fetch::drain_200k_due_jobs,
            lease::expired_lease_is_a_failed_attempt,
            lease::extend_keeps_the_lease,
            lease::stale_tokens_change_nothing,
            lease::release_gives_the_attempt_back_at_the_front,
            lease::release_of_many_keeps_their_order,
            lease_retry::lease_expiry_retries_draw_their_own_jitter,
            lease_retry::lease_expiry_retries_without_jitter_are_exact,
            due::scheduled_and_retry_are_promoted_in_due_order,
            retry::retry_schedule_until_dead,
            retry::defer_spends_no_attempt,
            retry::fail_many_gives_each_job_its_own_outcome,
            retry::long_errors_are_cut_with_a_marker,
            retry_fn::a_retry_function_retries_then_buries,
            retry_fn::a_discarded_job_is_deleted_and_counted,
            retry_fn::a_lease_expiry_follows_the_retry_function,
            dead_queue::dead_queue_list_requeue_purge,
            dead_queue::dead_queue_cap_trims_oldest,
            dead_queue::dead_queue_retention_trims_old,
            dead_sweep::sweep_requeues_and_purges_by_filter,
            dead_sweep::sweep_does_not_revisit_jobs_that_die_again,
            dead_sweep::list_dead_pages_by_filter,
            dead_sweep::bad_dead_filters_are_refused,
            dead_sweep::act_on_dead_only_as_listed,
            bad_input::invalid_topics_and_keys_write_nothing,
            bad_input::oversized_payloads_are_refused,
            bad_input::bulk_with_one_bad_item_writes_nothing,
            group_commit::concurrent_single_enqueues_keep_their_order,
            stats::stats_count_states_and_counters,
            stats::stats_oldest_overdue,
            stats::wake_tokens_for_due_and_earliest_jobs,
            stats::no_leftovers_after_mixed_workload,
            stats::success_after_a_cancel_request_counts_as_succeeded,
            topics::first_use_records_the_partition_count,
            topics::mismatch_is_a_typed_error_before_any_write,
            topics::an_unconfigured_client_adopts_the_recorded_count,
            topics::topics_lists_every_recorded_topic,
            topics::reset_refuses_while_jobs_exist,
            limits::pause_stops_leasing_until_resumed,
            limits::concurrency_cap_bounds_running_jobs,
            limits::rate_limit_caps_leases,
            limits::handler_throttle_slows_the_topic,
            limits::cancel_of_a_running_job,
            limits::limits_are_split_over_partitions,
            schedules::schedules_are_stored_listed_and_removed,
            schedules::racing_scheduler_passes_store_each_tick_once,
            shapes::payload_shapes_are_stored_replaced_and_deleted,
            formats::a_process_reading_less_than_the_level_is_refused,
            expiry::an_expired_job_is_never_started,
            expiry::a_job_waiting_for_a_retry_expires,
            expiry::an_expiry_that_cannot_be_kept_is_refused,
            expiry::an_expiry_needs_format_4,
            expiry::a_running_job_is_not_dropped_by_its_expiry,
            expiry::a_requeued_dead_job_runs_after_its_expiry,
            kept::a_topic_keeps_the_outcomes_its_retention_names,
            kept::what_a_topic_does_not_keep_is_deleted,
            kept::kept_jobs_go_by_time_and_beyond_the_cap,
            kept::a_key_enqueued_again_keeps_its_last_run,
            kept::a_bad_retention_is_refused,
            kept::results_are_read_back_typed,
            kept::a_wait_reports_a_dead_job,
            events::every_change_of_a_job_is_an_event,
            events::only_a_topic_that_asks_records_events,
            events::the_stream_is_bounded,
            events::a_bad_events_policy_is_refused,
            events::a_reader_resumes_from_its_cursor,
            events::a_read_starts_after_any_event_number,
            progress::a_running_job_reports_progress_and_log_lines,
            progress::every_other_end_of_a_run_clears_its_progress,
            update::a_waiting_job_gets_its_new_payload_and_keeps_the_rest,
            update::running_dead_and_missing_jobs_are_not_updated,
            priority::due_jobs_are_leased_highest_priority_first,
            priority::jobs_due_together_are_leased_by_priority,
            priority::a_job_keeps_its_priority_through_every_move,
            priority::a_priority_is_checked_and_needs_format_5,
            priority::a_low_job_is_leased_whenever_room_is_left,
            groups::groups_take_turns,
            groups::every_group_gets_a_turn_before_any_gets_two,
            groups::a_weight_is_jobs_per_turn,
            groups::a_group_never_runs_over_its_cap,
            groups::a_group_rate_holds_only_that_group,
            groups::a_throttle_holds_only_its_group,
            groups::a_job_keeps_its_group_through_every_move,
            groups::a_group_is_checked_and_needs_format_6,
            groups::a_group_emptied_and_refilled_by_one_fetch_keeps_its_turn,
            groups::a_job_replaced_into_a_group_keeps_its_limits,
            formats::both_formats_live_a_whole_job_life,
            formats::a_newer_record_is_left_untouched_and_reported,
            formats::older_records_stay_readable_as_newer_ones_are_written,
            enqueue_hook::a_refused_enqueue_writes_nothing,
            enqueue_hook::bulk_enqueue_asks_the_hook_per_job,
            windows::unique_for_refuses_the_key_after_its_job_finished,
            windows::unique_for_starts_when_fetch_ends_the_job,
            windows::debounce_runs_the_last_payload_after_the_last_enqueue,
            windows::throttle_drops_enqueues_inside_its_window,
            windows::max_delay_refuses_far_due_times,
            batches::each_end_of_a_member_is_noted_once_with_its_outcome,
            batches::expiries_and_lost_leases_of_members_are_noted,
            batches::a_retried_ack_or_fail_of_one_lease_notes_nothing_more,
            batches::the_relay_applies_each_note_once_and_calls_back_once,
            batches::a_batch_record_moves_members_forward_only_and_counts_each_once,
            batches::the_index_lists_open_batches_and_a_done_batch_is_kept_for_its_retention,
            batches::a_member_keeps_its_batch_through_every_move,
            batches::a_job_replacing_a_member_stays_in_its_batch,
            batches::batches_need_format_7_and_nothing_is_written_below_it,
            batches::an_add_refuses_a_taken_key_and_counts_a_repeated_one_once,
            batches::a_cancelled_batch_ends_every_member_cancelled,
            batches::an_add_repeated_after_its_members_ended_enqueues_none_again,
            batches::an_add_repeated_after_a_producer_died_mid_add_runs_no_member_twice,
        );
        $crate::conformance_suite!(@props $new;
            hostile_topic_names => bad_input::hostile_topic,
            hostile_job_keys => bad_input::hostile_key,
        );
    };
    (@bodies $new:expr; $($module:ident :: $name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let h = $new;
            $crate::common::conformance::$module::$name(&h).await;
            $crate::common::Harness::check_invariants(&h).await;
        }
    )*};
    (@props $new:expr; $($test:ident => $module:ident :: $body:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            let rt = $crate::common::conformance::prop_runtime();
            let h = rt.block_on(async { $new });
            let mut runner = $crate::common::conformance::prop_runner();
            let outcome = runner.run(&$crate::common::conformance::hostile_string(), |s| {
                rt.block_on($crate::common::conformance::$module::$body(&h, &s));
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{}: {e}", stringify!($body));
            }
            rt.block_on(async {
                $crate::common::Harness::check_invariants(&h).await;
                $crate::common::Harness::assert_no_leftovers(&h).await;
            });
        }
    )*};
}
