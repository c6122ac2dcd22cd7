//! The dashboard's one style sheet, inlined in every page (the pages load nothing else).

pub(super) const CSS: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2733;background:#f5f7fa}
header{display:flex;align-items:center;gap:16px;padding:10px 24px;background:#1d2733;color:#fff}
header a{color:#cfe0ff;text-decoration:none}
.brand{font-weight:700;font-size:18px;color:#fff!important;letter-spacing:.5px}
.crumbs{color:#9fb0c4}
.links{margin-left:auto}.links a+a{margin-left:12px}.links+.badge{margin-left:0}
.badge{margin-left:auto;background:#e69a00;color:#1d2733;border-radius:10px;padding:1px 10px;font-size:12px;font-weight:600}
main{padding:16px 24px;max-width:1400px}
h1{font-size:22px;margin:6px 0 14px}h2{font-size:16px;margin:22px 0 8px}
a{color:#1f5fbf}
.muted{color:#6b7785}small{font-weight:400;font-size:14px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08);border-radius:6px;overflow:hidden;min-width:480px}
th,td{padding:6px 12px;border-bottom:1px solid #e8ebef;text-align:left;vertical-align:top}
thead th{background:#eef1f5;font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.3px;color:#4a5562}
tfoot th,tfoot td{background:#f8f9fb;font-weight:600}
.n{text-align:right;font-variant-numeric:tabular-nums}
td.dead,span.dead{color:#c0392b;font-weight:700}
.err{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;color:#8a2d22;max-width:560px;word-break:break-word}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin-top:20px}
.chart{margin:0;background:#fff;padding:10px 12px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.chart figcaption{font-weight:600;font-size:13px;margin-bottom:4px}
.legend{display:flex;gap:12px;flex-wrap:wrap;font-size:12px;color:#4a5562}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.tabs{display:flex;gap:4px;margin:14px 0 0}
.tabs a{padding:6px 12px;border-radius:6px 6px 0 0;background:#e4e8ee;text-decoration:none;color:#1d2733}
.tabs a.current{background:#fff;font-weight:600}
.count{display:inline-block;min-width:20px;padding:0 6px;border-radius:9px;background:#d5dbe3;font-size:12px;text-align:center}
.search{display:flex;gap:6px;margin:6px 0 10px}
input[type=text]{padding:5px 8px;border:1px solid #c5ccd6;border-radius:4px;min-width:280px}
button{padding:4px 10px;border:1px solid #9fb0c4;border-radius:4px;background:#fff;cursor:pointer;font-size:13px}
button:hover{background:#eef3fb}
button.danger{border-color:#e0a39b;color:#a23325}
.actions{white-space:nowrap}.actions form{display:flex;gap:6px}.actions>button+button{margin-left:6px}
form.job-actions{display:flex;gap:6px;margin:12px 0}
.bulk{display:flex;gap:8px;align-items:center;margin:10px 0}.sep{width:16px}
.notice{background:#e6f5ec;border:1px solid #a7dcb9;padding:6px 12px;border-radius:4px;display:inline-block}
.error{color:#a23325}
.leasing{white-space:nowrap}
.flag{display:inline-block;margin-right:4px;padding:0 8px;border-radius:9px;font-size:12px;font-weight:600;background:#e4e8ee;color:#1d2733}
.flag.paused{background:#f6d5d1;color:#a23325}.flag.throttled{background:#fbe7c2;color:#7a4d00}.flag.limit{background:#d6e6fb;color:#1f4f8f}
.pager a{margin-right:12px}
td.priority.high{font-weight:700;color:#1f4f8f}td.priority.low{color:#6b7785}
.kv th{width:140px;background:#f8f9fb}
.state{padding:1px 8px;border-radius:9px;background:#d5dbe3;font-weight:600;font-size:12px}
.state.dead{background:#f6d5d1;color:#a23325}.state.ready{background:#d6e6fb}.state.retry{background:#fbe7c2}
.state.succeeded,.state.batch-done{background:#e6f5ec;color:#1e6b3a}.state.batch-complete{background:#fbe7c2}.state.batch-open{background:#d6e6fb}
pre.payload{background:#fff;padding:12px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08);overflow:auto;max-height:480px}
"#;
