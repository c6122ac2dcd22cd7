//! dq's worker runtime. Stub until the framework issue.
