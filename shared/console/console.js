"use strict";
const base = location.pathname.replace(/\/console\/?$/, "");
const main = document.getElementById("main");
let timer = null;

// Where the platform signs an operator in, and brings them back here.
const signIn = "/.auth/login/aad?post_login_redirect_uri=" + encodeURIComponent(location.pathname);

class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

// What would act on the page rather than show in text from outside (a bidi override reversing
// what follows, zero-width characters, controls, line separators): written out, as `orders`
// writes it (shared/domain/text.py).
const ACTING = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/gu;
const escaped = code => code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0")
  : code < 0x10000 ? "\\u" + code.toString(16).padStart(4, "0")
  : "\\U" + code.toString(16).padStart(8, "0");
// lines: its line breaks are the page's own (JSON laid out), kept.
const inert = (v, lines = false) => v === null || v === undefined ? v : String(v).replace(
  ACTING, c => lines && c === "\n" ? c : escaped(c.codePointAt(0)));

// Every piece of data goes in as text: nothing from the store is ever parsed as HTML.
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = inert(v);
    else if (k === "lines") e.textContent = inert(v, true);
    else if (k === "onclick" || k === "onsubmit") e[k] = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined)
    e.append(typeof c === "string" ? document.createTextNode(inert(c)) : c);
  return e;
}

async function api(path, options = {}) {
  const r = await fetch(base + path, Object.assign({}, options,
                                                   {credentials: "same-origin", cache: "no-store"}));
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!r.ok) {
    throw new ApiError(body && body.error ? body.error : `HTTP ${r.status}`, r.status);
  }
  return body;
}

// An operator's action on one thing: POSTed as JSON (as every change is: web.py's check), and
// what it came to, as a line for said(): what ``ok`` makes of the answer, or the API's refusal
// in its own words.
async function post(kind, path, payload, ok) {
  try {
    const body = await api(path, {method: "POST", headers: {"content-type": "application/json"},
                                  body: JSON.stringify(payload)});
    return {for: kind, ok: true, text: ok(body)};
  } catch (e) {
    return {for: kind, ok: false, text: String(e.message || e)};
  }
}

// A time in the viewer's own zone, and in UTC on hover (and for a screen reader, the
// machine-readable datetime).
function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return el("time", {datetime: d.toISOString(), title: utc(d), text: d.toLocaleString()});
}
function utc(d) { return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC"); }
function duration(seconds) {
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
  return (h ? `${h}h ` : "") + (h || m ? `${m}m ` : "") + `${s % 60}s`;
}
function orderLink(id) {
  return el("a", {href: "#/orders/" + encodeURIComponent(id), "data-order": id, text: id});
}
function table(testid, columns, rows, rowFn) {
  if (!rows.length) return el("p", {class: "empty", "data-testid": testid, text: "none"});
  const t = el("table", {"data-testid": testid},
    el("thead", {}, el("tr", {}, ...columns.map(c => el("th", {text: c})))));
  const body = el("tbody");
  for (const r of rows) body.append(rowFn(r));
  t.append(body);
  return t;
}
function cell(value, cls) {
  const td = el("td", cls ? {class: cls} : {});
  td.append(value instanceof Node ? value : inert(String(value ?? "")));
  return td;
}

function cards(testid, title, counts, badKeys) {
  return el("section", {"data-testid": testid}, el("h2", {text: title}),
    el("div", {class: "cards"}, ...Object.entries(counts).map(([k, n]) =>
      el("div", {class: "card" + (badKeys.includes(k) && n ? " bad" : ""),
                 "data-testid": `${testid}-${k}`},
         el("b", {text: String(n)}), el("span", {text: k})))));
}

// The steps the last overview's failed orders failed at: the bulk page offers them.
let failedSteps = [];
function renderOverview(o, pauses, redrives) {
  failedSteps = [...new Set([...o.Failed, ...o.CompensationFailed]
    .map(r => r.FailedStep).filter(Boolean))].sort();
  const scanned = o.Complete ? "" : ` (the first ${o.Counted} records; there are more)`;
  main.replaceChildren(...[
    pausedBanner(o.Paused || []),
    cards("by-state", "Orders by state" + scanned, o.ByState, ["Error"]),
    cards("by-compensation", "Compensation", o.ByCompensation, ["Failed"]),
    el("section", {}, el("h2", {}, "In flight ", el("small", {text: "most overdue first "}),
        el("a", {href: "#/cancel", "data-testid": "bulk-cancel-open",
                 text: "cancel several at once"})),
      table("in-flight", ["order", "state", "step", "complete by", "overdue", "failures"],
        o.InFlight, r => el("tr", {class: r.OverdueSeconds ? "overdue" : "",
                                   "data-order": r.OrderID},
          cell(orderLink(r.OrderID), "id"),
          cell(r.ProcessState + (r.Compensation ? ` / compensation ${r.Compensation}` : "")),
          cell(r.CurrentStep), cell(when(r.CompleteBy)),
          cell(r.OverdueSeconds ? `overdue by ${duration(r.OverdueSeconds)}` : "", "late"),
          cell(r.FailureCount)))),
    el("section", {}, el("h2", {}, "Parked: waiting for a person ",
        el("small", {text: "the longest waiting first: resume each once the person has acted, " +
                           "or cancel it"})),
      table("parked", ["order", "step", "what is needed", "waiting since"], o.Parked || [],
        r => el("tr", {"data-order": r.OrderID}, cell(orderLink(r.OrderID), "id"),
                cell(r.FailedStep), cell(needed(r), "needs"), cell(when(r.UpdatedAt))))),
    el("section", {}, el("h2", {}, "Failed ", el("small", {text: "newest first "}),
        el("a", {href: "#/resubmit", "data-testid": "bulk-open",
                 text: "resubmit several at once"}), ", or ",
        el("a", {href: "#", "data-testid": "redrives-go", text: "re-drive them in the background",
                 onclick: ev => {
                   ev.preventDefault();
                   document.getElementById("redrives-heading").focus();
                 }})),
      table("failed", ["order", "failed step", "reason", "compensation", "resubmissions",
                       "updated"], o.Failed, failedRow)),
    el("section", {}, el("h2", {}, "Compensation failed ",
        el("small", {text: "work may still stand at the services: check, then resubmit with force"})),
      table("compensation-failed", ["order", "failed step", "reason", "compensation",
                                    "resubmissions", "updated"], o.CompensationFailed, failedRow)),
    el("section", {}, el("h2", {}, "Alerts ", el("small", {text: "not yet acknowledged"})),
      o.AlertsComplete === false ? el("p", {class: "more", role: "status",
        text: "The newest 2,000 alerts of the last 7 days were read: older ones, open ones " +
              "among them, are not shown."}) : null,
      ackResult(),
      table("alerts", ["raised", "kind", "order", "step", "reason", ""], o.Alerts,
        a => el("tr", {"data-alert": a.AlertId},
          cell(when(a.RaisedAt)), cell(a.Kind),
          cell(a.OrderID ? orderLink(a.OrderID) : "", "id"), cell(a.Step), cell(a.Reason),
          cell(el("button", {type: "button", "data-testid": "ack", text: "Acknowledge",
                             onclick: () => acknowledge(a)}))))),
    el("section", {}, el("h2", {}, "Acknowledged ", el("small", {text: "who and when"})),
      table("acknowledged", ["raised", "kind", "order", "reason", "acknowledged by",
                             "when", "note"], o.Acknowledged,
        a => el("tr", {"data-alert": a.AlertId},
          cell(when(a.RaisedAt)), cell(a.Kind),
          cell(a.OrderID ? orderLink(a.OrderID) : "", "id"), cell(a.Reason),
          cell(a.AcknowledgedBy), cell(when(a.AcknowledgedAt)), cell(a.AckNote)))),
    el("section", {}, el("h2", {text: "Rejected intake"}),
      table("rejected", ["rejected", "kind", "message id", "reason", "deliveries"], o.Rejected,
        r => el("tr", {}, cell(when(r.RejectedAt)), cell(r.Kind), cell(r.MessageId, "id"),
                cell(r.Reason), cell(r.DeliveryCount)))),
    redrivePanel(redrives.Redrives,
                 pauses.Pauses.filter(p => p.Kind === "workflow").map(p => p.Name)),
    pausePanel(pauses.Pauses),
  ].filter(Boolean));
}
// The last acknowledgement's outcome, shown above the alerts until the next one.
let ackMessage = null;
function ackResult() {
  return ackMessage ? el("p", {class: ackMessage.ok ? "" : "error",
                               "data-testid": "ack-result", text: ackMessage.text}) : null;
}
async function acknowledge(a) {
  ackMessage = await post("ack", `/alerts/${encodeURIComponent(a.AlertId)}/ack`, {},
                          body => `${a.Kind} acknowledged by ${body.AcknowledgedBy}.`);
  await show();
}

// Pauses: an operator holds a service's calls, or a workflow's new orders, until they resume
// it (GET /api/pauses; POST /api/pauses/{kind}/{name} with a reason, .../resume). What is
// paused is said at the top of the overview, so that orders waiting by design do not pass for
// stuck ones; the panel at its foot pauses and resumes: a button first, then a form, as the
// cancel of an order (a form on the page holds it still).
const PAUSE_MEANS = "A paused service's Agent calls nothing: its steps wait, their time " +
  "stopped, no failure counted. A paused workflow's new orders are taken and wait, Pending. " +
  "Both go on when resumed. Not the circuit breaker: that one is automatic, per instance, and " +
  "lasts seconds; a pause is an operator's, holds on every instance within 5 s and lasts " +
  "until resumed.";
const pauseKey = p => `${p.Kind}:${p.Name}`;

function pausedBanner(paused) {
  if (!paused.length) return null;
  const go = el("a", {href: "#", "data-testid": "pauses-go", text: "pause or resume",
                      onclick: ev => {
                        ev.preventDefault();
                        document.getElementById("pauses-heading").focus();
                      }});
  return el("section", {class: "paused", "data-testid": "paused-banner"},
    el("h2", {}, "Paused by an operator ",
       el("small", {text: "their orders wait, by design, until resumed: "}), go),
    table("paused", ["kind", "name", "paused by", "since", "reason"], paused,
      p => el("tr", {"data-pause": pauseKey(p)}, cell(p.Kind), cell(p.Name, "id"),
              cell(p.By), cell(when(p.Since)), cell(p.Reason))));
}

// The last pause's or resume's outcome, shown in the panel until the next one.
let pauseMessage = null;
function pausePanel(pauses) {
  const section = el("section", {"data-testid": "pauses"},
    el("h2", {id: "pauses-heading", tabindex: "-1"}, "Pauses ",
       el("small", {text: "every service and workflow, the paused first"})),
    el("p", {class: "empty", text: PAUSE_MEANS}));
  if (pauseMessage) said(section, "pause-result", pauseMessage);
  section.append(table("pauses-list", ["kind", "name", "state", "since", "by", "reason",
                                       "last paused", ""], pauses,
    p => el("tr", {"data-pause": pauseKey(p), class: p.Paused ? "paused" : ""},
      cell(p.Kind), cell(p.Name, "id"), cell(p.Paused ? "paused" : "running", "state"),
      cell(when(p.Since)), cell(p.By), cell(p.Reason), cell(lastPaused(p.LastPaused)),
      cell(el("button", {type: "button", "data-testid": p.Paused ? "resume-open" : "pause-open",
                         "aria-label": `${p.Paused ? "Resume" : "Pause"} ${p.Kind} ${p.Name}...`,
                         text: p.Paused ? "Resume..." : "Pause...",
                         onclick: () => pauseForm(section, p)})))));
  return section;
}
function lastPaused(ended) {
  if (!ended || !ended.length) return "";
  const [from, to] = ended[ended.length - 1];
  return el("span", {}, when(from), " to ", when(to));
}

// The form for one row, below the list (one at a time): a pause needs a reason, refused here
// without one; a resume's is optional. Sent as the operator signed in.
function pauseForm(section, p) {
  const resume = p.Paused, what = `${p.Kind} ${p.Name}`, service = p.Kind === "service";
  const reason = el("textarea", Object.assign({name: "reason", rows: "2", maxlength: "1000"},
                                              resume ? {} : {"aria-required": "true"}));
  const send = el("button", {type: "submit", "data-testid": "pause-send",
                             text: `${resume ? "Resume" : "Pause"} ${what}`});
  const form = el("form", {"data-testid": "pause-form", "data-pause": pauseKey(p)},
    el("label", {}, resume ? `Why resume ${what} (optional, kept in the audit log)`
                           : `Why pause ${what} (shown with the pause)`, reason),
    el("p", {class: "notice", text: (resume
      ? (service ? "Its held steps are sent again, no failure counted."
                 : "Its waiting orders start, the longest-waiting first.")
      : (service ? "Its Agent calls nothing and its steps wait until it is resumed."
                 : "Its new orders are taken and wait, Pending, until it is resumed.")) +
      " On every instance within 5 s. As you: your name is kept with it."}),
    send);
  form.onsubmit = async ev => {
    ev.preventDefault();
    const text = String(new FormData(form).get("reason") || "");
    if (!resume && !text.trim()) {  // refused here: nothing is sent
      said(section, "pause-result",
           {ok: false, text: `Say why ${what} is paused: a pause needs a reason.`}).focus();
      return;
    }
    send.disabled = true;  // once: a second click would be refused as paused already
    pauseMessage = await post("pause", `/pauses/${encodeURIComponent(p.Kind)}/` +
                              encodeURIComponent(p.Name) + (resume ? "/resume" : ""),
                              {reason: text}, body => body.Paused
      ? `Paused ${what} as ${body.By}: ` +
        (service ? "its steps wait until it is resumed." : "its new orders wait, Pending.")
      : `Resumed ${what}: it runs again.`);
    await show(pauseMessage);
  };
  section.querySelector("[data-testid=pause-form]")?.remove();
  section.append(form);
  reason.focus();
}

// Re-drives: failed orders resubmitted in the background, at a pace, with progress (GET
// /api/redrives, the newest first; POST /api/redrives, a preview unless dry_run is false;
// POST /api/redrives/{id}/pause, .../resume, .../cancel, with a reason). The panel refreshes
// with the overview, so their progress moves; its forms, as the pauses': a button first, then
// the form below the list (one at a time, and a form on the page holds it still).
const REDRIVE_MEANS = "A re-drive resubmits the failed orders its filters pick, in the " +
  "background, so many a second, each as a single resubmit is (its reason and the name of " +
  "whoever started it in the order's history), until every one has been through it. Orders " +
  "that fail after it starts are not its to pick. A paused one stops before its next order; " +
  "a cancelled one ends: the orders it resubmitted run on, the rest stay failed.";
const REDRIVE_ACTS = {
  pause: {verb: "Pause", needs: true,
          notice: "It stops before its next order, within a second, until it is resumed; " +
                  "the orders it resubmitted run on.",
          done: (what, r) => `Paused ${what} as ${r.ChangedBy}: it stops before its next ` +
                             "order until it is resumed."},
  resume: {verb: "Resume", needs: false,
           notice: "It goes on where it stopped, at its pace.",
           done: (what, r) => `Resumed ${what}: it goes on, ${r.Rate} a second.`},
  cancel: {verb: "Cancel", needs: true,
           notice: "It ends, and cannot be resumed: the orders it resubmitted run on; the " +
                   "rest stay failed.",
           done: what => `Cancelled ${what}: the orders it resubmitted run on; the rest stay ` +
                         "failed."},
};

// The last start's, pause's, resume's or cancel's outcome, shown in the panel until the next.
let redriveMessage = null;
function redrivePanel(redrives, workflows) {
  const section = el("section", {"data-testid": "redrives"},
    el("h2", {id: "redrives-heading", tabindex: "-1"}, "Re-drives ",
       el("small", {text: "failed orders resubmitted in the background, the newest first"})),
    el("p", {class: "empty", text: REDRIVE_MEANS}));
  if (redriveMessage) said(section, "redrive-result", redriveMessage);
  section.append(
    el("p", {}, el("button", {type: "button", "data-testid": "redrive-open",
                              text: "Re-drive failed orders...",
                              onclick: () => redriveForm(section, workflows)})),
    table("redrives-list", ["re-drive", "state", "picks", "rate", "progress", "started by",
                            "why", "latest refusals", ""], redrives, r => redriveRow(section, r)));
  return section;
}

function redriveRow(section, r) {
  const act = action => el("button", {type: "button", "data-testid": `redrive-${action}-open`,
    "aria-label": `${REDRIVE_ACTS[action].verb} re-drive ${r.Id}...`,
    text: `${REDRIVE_ACTS[action].verb}...`, onclick: () => redriveChange(section, r, action)});
  const acts = {running: ["pause", "cancel"], paused: ["resume", "cancel"]}[r.State] || [];
  // Who paused, resumed or cancelled it last, and why (a done one: ended by itself).
  const changed = r.ChangedBy && r.State !== "done"
    ? `${r.State === "running" ? "resumed" : r.State} by ${r.ChangedBy}` +
      (r.ChangeReason ? `: ${r.ChangeReason}` : "") : null;
  return el("tr", {"data-redrive": r.Id, class: r.State},
    cell(el("span", {}, el("code", {text: r.Id}), el("br"), "started ", when(r.Created))),
    cell(el("span", {}, el("span", {class: "state", text: r.State}),
      r.Waiting ? el("span", {class: "notice", "data-testid": "redrive-waiting",
                              text: ` waiting: ${r.Waiting}`}) : null,
      changed ? el("span", {class: "empty", "data-testid": "redrive-changed",
                            text: ` ${changed}`}) : null,
      r.Ended ? el("span", {class: "empty"}, " ended ", when(r.Ended)) : null)),
    cell(r.Picks), cell(`${r.Rate} a second`),
    cell(`${r.Resubmitted} resubmitted, ${r.Refused} refused, ${r.InHand} in hand, ` +
         `${r.Scanned} failed orders read`, "progress"),
    cell(r.By), cell(r.Reason),
    cell(r.Refusals.length ? el("ul", {class: "refusals", "data-testid": "redrive-refusals"},
      ...r.Refusals.map(x => el("li", {"data-order": x.OrderID}, orderLink(x.OrderID),
                                `: ${x.Why}`))) : ""),
    cell(el("span", {}, ...acts.flatMap(a => [act(a), " "]))));
}

// One form in the panel at a time, below the list; the keyboard on its first field.
function panelForm(section, form, first) {
  section.querySelector("form")?.remove();
  section.append(form);
  first.focus();
}

// Pause, resume or cancel one re-drive: a pause and a cancel need a reason, refused here
// without one; a resume's is optional. Sent as the operator signed in.
function redriveChange(section, r, action) {
  const {verb, needs, notice, done} = REDRIVE_ACTS[action];
  const what = `re-drive ${r.Id}`;
  const reason = el("textarea", Object.assign({name: "reason", rows: "2", maxlength: "1000"},
                                              needs ? {"aria-required": "true"} : {}));
  const send = el("button", {type: "submit", "data-testid": "redrive-send",
                             text: `${verb} ${what}`});
  const form = el("form", {"data-testid": "redrive-change-form", "data-redrive": r.Id,
                           "data-action": action},
    el("label", {}, `Why ${verb.toLowerCase()} ${what}` +
                    (needs ? " (kept in the audit log)" : " (optional, kept in the audit log)"),
       reason),
    el("p", {class: "notice", text: `${notice} As you: your name is kept with it.`}),
    send);
  form.onsubmit = async ev => {
    ev.preventDefault();
    const text = String(new FormData(form).get("reason") || "");
    if (needs && !text.trim()) {  // refused here: nothing is sent
      said(section, "redrive-result", {ok: false, text: `Say why ${what} is ` +
        `${action === "pause" ? "paused" : "cancelled"}: a ${action} needs a reason.`}).focus();
      return;
    }
    send.disabled = true;  // once: a second click would be refused
    redriveMessage = await post("redrive", `/redrives/${encodeURIComponent(r.Id)}/${action}`,
                                {reason: text}, body => done(what, body));
    await show(redriveMessage);
  };
  panelForm(section, form, reason);
}

// Start one: its filters (none: every failed order), its pace and why. Preview (a dry run,
// the form's Enter) says how many of the failed orders one look reads it would pick, and the
// first few; it changes nothing, and a field changed since drops it. Start needs a reason.
function redriveForm(section, workflows) {
  const field = (label, input) => el("label", {}, label, " ", input);
  const steps = el("datalist", {id: "redrive-steps"},
                   ...failedSteps.map(step => el("option", {value: step})));
  const flows = el("datalist", {id: "redrive-workflows"},
                   ...workflows.map(name => el("option", {value: name})));
  const first = el("input", {name: "failed_step", list: "redrive-steps", maxlength: "128",
                             autocomplete: "off"});
  const start = el("button", {type: "button", "data-testid": "redrive-start",
                              text: "Start the re-drive"});
  const answer = el("div", {"data-testid": "redrive-preview", class: "bulk-plan"});
  const form = el("form", {"data-testid": "redrive-form", class: "bulk-form"},
    el("h3", {class: "wide", text: "Re-drive failed orders"}),
    el("p", {class: "empty wide", text: "Each filter given must match; none picks every " +
      "failed order. Times are yours."}),
    field("Failed at step", first), steps,
    field("Last error contains", el("input", {name: "error_text", maxlength: "200",
                                              autocomplete: "off"})),
    field("Workflow (optional)", el("input", {name: "workflow", list: "redrive-workflows",
                                              maxlength: "64", autocomplete: "off"})), flows,
    field("Failed since (optional)", el("input", {type: "datetime-local", name: "since"})),
    field("Failed before (optional)", el("input", {type: "datetime-local", name: "until"})),
    field("Orders a second (optional)", el("input", {type: "number", name: "rate",
      min: "0.001", max: "1000", step: "any", placeholder: "its services' slowest limit"})),
    el("label", {class: "notice wide"}, el("input", {type: "checkbox", name: "force"}),
       " Also orders whose compensation failed: I have checked the services"),
    el("label", {class: "wide"}, "Reason (kept in each order's history)",
       el("textarea", {name: "reason", rows: "2", maxlength: "1000", "aria-required": "true"})),
    el("p", {class: "wide"}, el("button", {type: "submit", "data-testid": "redrive-preview-run",
                                           text: "Preview"}), " ", start, " ",
       el("span", {class: "empty", text: "started as you, your name in each order's history"})),
    el("div", {class: "wide"}, answer));
  const say = (text, ok = false) => {
    answer.replaceChildren(el("p", {class: ok ? "" : "error", "data-testid": "redrive-said",
                                    tabindex: "-1", text}));
    answer.firstChild.focus();
  };
  form.oninput = () => answer.replaceChildren();  // a preview holds for what it ran on
  form.onsubmit = async ev => {
    ev.preventDefault();
    let p;
    try {
      p = await api("/redrives", {method: "POST", headers: {"content-type": "application/json"},
        body: JSON.stringify(Object.assign(redriveAsk(form), {dry_run: true}))});
    } catch (e) {
      return say(String(e.message || e));
    }
    const more = p.More ? " (more failed orders than one look reads: it may pick more)" : "";
    say(`Would pick ${p.Matched} of ${p.Scanned} failed orders read${more}: ${p.Picks}, ` +
        `${p.Rate} a second (a preview: nothing was changed)`, true);
    if (p.Sample.length) answer.append(el("p", {"data-testid": "redrive-sample"}, "e.g. ",
      ...p.Sample.flatMap((id, i) => [i ? ", " : "", orderLink(id)])));
  };
  start.onclick = async () => {
    const ask = redriveAsk(form);
    if (!ask.reason.trim())  // refused here: nothing is sent
      return say("Say why they are re-driven: a re-drive needs a reason.");
    start.disabled = true;  // once: a second click would be a second re-drive
    const m = await post("redrive", "/redrives", Object.assign(ask, {dry_run: false}),
      body => `Started re-drive ${body.Id}: ${body.Picks}, ${body.Rate} a second. Its ` +
              "progress shows in the list.");
    if (!m.ok) {  // the form stays as filled in, to be put right
      start.disabled = false;
      return say(m.text);
    }
    redriveMessage = m;
    await show(m);
  };
  panelForm(section, form, first);
}

function redriveAsk(form) {
  const f = new FormData(form);
  const text = name => String(f.get(name) || "").trim() || null;
  // A datetime-local is the viewer's own time: sent as UTC (the API needs the zone).
  const at = name => f.get(name) ? new Date(String(f.get(name))).toISOString() : null;
  return {workflow: text("workflow"), failed_step: text("failed_step"),
          error_text: text("error_text"), since: at("since"), until: at("until"),
          force: f.get("force") === "on",
          rate: text("rate") === null ? null : Number(f.get("rate")),
          reason: String(f.get("reason") || "")};
}

// What a parked order waits for: its reason without the step's name before it (LastError is
// "<step> needs a person: <what>", shared/domain/transitions.py).
function needed(o) {
  const prefix = `${o.FailedStep} needs a person: `;
  return o.LastError && o.LastError.startsWith(prefix) ? o.LastError.slice(prefix.length)
                                                       : o.LastError;
}

function failedRow(r) {
  return el("tr", {"data-order": r.OrderID}, cell(orderLink(r.OrderID), "id"),
    cell(r.FailedStep), cell(r.LastError), cell(r.Compensation), cell(r.Resubmissions),
    cell(when(r.UpdatedAt)));
}

function renderOrder(o, message) {
  const steps = table("steps", ["step", "status", "attempt", "complete by", "last error",
                                "work key", "in doubt", "result"], o.Steps,
    s => el("tr", {"data-step": s.name},
    cell(s.name), cell(s.status), cell(s.attempt), cell(when(s.complete_by)),
    cell(s.last_error), cell(s.work_key, "id"), cell(s.in_doubt ? "yes" : ""),
    cell(s.result == null ? "" : JSON.stringify(s.result), "result")));
  const history = table("history", ["at", "event", "by", "reason", "forced", "before"], o.History,
    h => el("tr", {}, cell(when(h.at)), cell(h.event), cell(h.by), cell(h.reason),
            cell(h.forced ? "yes" : ""),
            cell(Object.entries(h.steps || {}).map(([k, v]) => `${k}: ${v}`).join("; "))));
  const facts = [["workflow", o.Workflow ? `${o.Workflow} v${o.WorkflowVersion}` : "default"],
    ["state", o.ProcessState], ["compensation", o.Compensation || ""],
    ["current step", o.CurrentStep || ""], ["complete by", when(o.CompleteBy)],
    ["failures", String(o.FailureCount)], ["failed step", o.FailedStep || ""],
    ["last error", o.LastError || ""], ["resubmissions", String(o.Resubmissions)],
    ["rescues", String(o.Rescues)], ["created", when(o.CreatedAt)],
    ["updated", when(o.UpdatedAt)]];
  main.replaceChildren(...[
    el("section", {"data-testid": "order"},
      el("h2", {id: "order-heading", tabindex: "-1"}, "Order ", el("code", {text: o.OrderID}),
         " ", el("small", {text: "Escape: back"})),
      el("dl", {}, ...facts.flatMap(([k, v]) => [el("dt", {text: k}),
                                                   el("dd", {"data-field": k}, v)]))),
    el("section", {}, el("h2", {text: "Steps"}), steps),
    el("section", {}, el("h2", {text: "Resubmissions"}), history),
    resumeForm(o, message),
    resubmitForm(o, message),
    cancelForm(o, message),
    el("section", {}, el("h2", {text: "The order"}),
       el("pre", {lines: JSON.stringify(o.Order, null, 2)})),
  ].filter(Boolean));
}

function resubmitForm(o, message) {
  const section = el("section", {"data-testid": "resubmit"}, el("h2", {text: "Resubmit"}));
  if (message && message.for === "resubmit")
    section.append(el("p", {class: message.ok ? "" : "error", "data-testid": "resubmit-result",
                            text: message.text}));
  if (o.ProcessState !== "Error") {
    section.append(el("p", {class: "empty", text: "Only an order in Error can be resubmitted."}));
    return section;
  }
  const force = o.Compensation === "Failed";
  const form = el("form", {},
    el("label", {}, "Reason (kept in the order's history)",
      el("textarea", {name: "reason", rows: "2", maxlength: "1000", required: ""})),
    force ? el("label", {class: "notice"}, el("input", {type: "checkbox", name: "force"}),
      " Its compensation failed: I have checked the services and want to resubmit anyway")
      : null,
    el("p", {class: "empty", text: "Resubmitted as you: your name is kept in its history."}),
    el("button", {type: "submit", text: "Resubmit"}));
  form.onsubmit = async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    await show(await post("resubmit", `/orders/${encodeURIComponent(o.OrderID)}/resubmit`,
                          {reason: f.get("reason"), force: f.get("force") === "on"},
                          body => `Resubmitted: now ${body.ProcessState}.`));
  };
  section.append(form);
  return section;
}

// What an action came to, or why it was not sent: one line under the section's heading, the
// same test id, replaced by the next.
function said(section, testid, m) {
  const p = el("p", {class: m.ok ? "" : "error", "data-testid": testid, tabindex: "-1",
                     text: m.text});
  const before = section.querySelector(`[data-testid=${testid}]`);
  if (before) before.replaceWith(p); else section.querySelector("h2").after(p);
  return p;
}

// Resume: a parked order (a step that needs a person, e.g. the customer must confirm the
// payment) goes on from that step, asked again under the same key, once the person has acted
// (POST /api/orders/{id}/resume, an optional reason). Only on a parked order's page (or to say
// what a resume came to); a button first, then the form, as a cancel.
function resumeForm(o, message) {
  const mine = message && message.for === "resume";
  if (o.ProcessState !== "Parked" && !mine) return null;
  const section = el("section", {"data-testid": "resume"}, el("h2", {text: "Resume"}));
  if (mine) said(section, "resume-result", message);
  if (o.ProcessState !== "Parked") {
    section.append(el("p", {class: "empty", text: "Only a Parked order can be resumed (a " +
                                                  "failed one is resubmitted)."}));
    return section;
  }
  section.append(el("p", {"data-testid": "resume-needs"}, `${o.FailedStep} waits for a ` +
                          "person: ", el("strong", {text: needed(o)})));
  const reason = el("textarea", {name: "reason", rows: "2", maxlength: "1000"});
  const send = el("button", {type: "submit", "data-testid": "resume-send",
                             text: "Resume the order"});
  const form = el("form", {"data-testid": "resume-form"},
    el("label", {}, "Reason (optional, kept in the order's timeline)", reason),
    el("p", {class: "notice", text: `Only once the person has acted: it goes on from ` +
      `${o.FailedStep}, the step that waited, asked again under the same key (its service ` +
      "takes it as the same piece of work); its done work stands. Resumed as you: your name " +
      "is kept with it."}),
    send);
  form.onsubmit = async ev => {
    ev.preventDefault();
    send.disabled = true;  // once: a second click would be refused as not parked
    await show(await post("resume", `/orders/${encodeURIComponent(o.OrderID)}/resume`,
                          {reason: String(new FormData(form).get("reason") || "")},
                          body => `Resumed: now ${body.ProcessState}, ${o.FailedStep} to be ` +
                                  "asked again under the same key."));
  };
  const open = el("button", {type: "button", "data-testid": "resume-order-open",
                             text: "Resume this order..."});
  open.onclick = () => { open.replaceWith(form); reason.focus(); };
  section.append(open);
  return section;
}

// Cancel: an order still running (Pending or Processing), or parked, is stopped, nothing more
// is sent for it, and the work it has done is undone (POST /api/orders/{id}/cancel, with a
// reason). A button first, then the form: a form on the page holds it still (see schedule),
// and a running order's page stays live until the operator means to cancel it. Several at once
// (POST /api/cancellations): running ones, or parked ones when their state is picked.
const RUNNING = ["Pending", "Processing"];
const CANCELLABLE = [...RUNNING, "Parked"];
function cancelForm(o, message) {
  const section = el("section", {"data-testid": "cancel"}, el("h2", {text: "Cancel"}));
  const say = m => said(section, "cancel-result", m);
  if (message && message.for === "cancel") say(message);
  if (!CANCELLABLE.includes(o.ProcessState)) {
    section.append(el("p", {class: "empty",
                            text: "Only a Pending, Processing or Parked order can be " +
                                  "cancelled."}));
    return section;
  }
  const reason = el("textarea", {name: "reason", rows: "2", maxlength: "1000",
                                 "aria-required": "true"});
  const send = el("button", {type: "submit", "data-testid": "cancel-send",
                             text: "Cancel the order"});
  const form = el("form", {"data-testid": "cancel-form"},
    el("label", {}, "Reason (kept with the order)", reason),
    el("p", {class: "notice", text: "Nothing more is sent for it and the work it has done is " +
      "undone; a cancelled order cannot be resubmitted. Cancelled as you: your name is kept " +
      "with it."}),
    send);
  form.onsubmit = async ev => {
    ev.preventDefault();
    const text = String(new FormData(form).get("reason") || "");
    if (!text.trim()) {  // refused here: nothing is sent
      say({ok: false, text: "Say why it is cancelled: a cancel needs a reason."}).focus();
      return;
    }
    send.disabled = true;  // once: a second click would be a second cancel
    await show(await post("cancel", `/orders/${encodeURIComponent(o.OrderID)}/cancel`,
                          {reason: text}, body => `Cancelled: now ${body.ProcessState}, its ` +
                                                  `work being undone (compensation ` +
                                                  `${body.Compensation}).`));
  };
  const open = el("button", {type: "button", "data-testid": "cancel-open",
                             text: "Cancel this order..."});
  open.onclick = () => { open.replaceWith(form); reason.focus(); };
  section.append(open);
  return section;
}

// Each show() is numbered: only the newest one's answer is drawn. A slow answer to an earlier
// one (the overview asked for at load, a refresh) would otherwise replace the page the
// operator has moved to since, and a form they were filling in with it.
let shown = 0;
// Where Escape on an order's page goes back to: the list it was opened from.
let listHash = "";
async function show(message) {
  const mine = ++shown;
  const hash = location.hash;
  const order = hash.match(/^#\/orders\/(.+)$/);
  const search = hash.startsWith("#/search?") ? new URLSearchParams(hash.slice(9)) : null;
  const stamp = document.getElementById("refreshed");
  try {
    let draw;
    if (order) {
      const body = await api("/orders/" + order[1]);
      draw = () => renderOrder(body, message);
    } else if (hash === "#/resubmit") {
      draw = () => renderBulk();  // nothing to read until the operator asks for a dry run
    } else if (hash === "#/cancel") {
      draw = () => renderBulkCancel();
    } else if (search) {
      const found = await find(search.get("q") || "", search.get("state") || "");
      draw = () => renderSearch(search, found);
    } else {
      const [body, pauses, redrives] = await Promise.all([api("/overview"), api("/pauses"),
                                                           api("/redrives")]);
      draw = () => renderOverview(body, pauses, redrives);
    }
    if (mine !== shown) return;
    // A refresh does not replace a form the operator opened while it was asked for (the
    // cancel form of a running order's page).
    if (!message && hash === arrivedAt && main.querySelector("form")) return;
    const focused = document.activeElement;
    draw();
    if (!order) listHash = hash;
    arrive(order, search, message, focused);
    stamp.textContent = "updated " + new Date().toLocaleTimeString();
    stamp.className = "meta";
  } catch (e) {
    if (mine !== shown) return;
    stamp.textContent = "could not refresh: " + inert(e.message);
    stamp.className = "meta error";
    if (e.status === 401)  // not signed in (or the session ended): the platform's sign-in
      stamp.append(" ", el("a", {href: signIn, "data-testid": "sign-in", text: "sign in"}));
  }
}

// Where the keyboard is once a page is drawn: on the order's heading when one was opened, on
// the first result of a search, back on the link that opened an order when it was closed; a
// refresh leaves it where it was.
let arrivedAt = null;
function arrive(order, search, message, focused) {
  const at = location.hash;
  if (at === arrivedAt && !message) {  // a refresh: the same element, if it is still there
    if (focused && focused.id) document.getElementById(focused.id)?.focus();
    return;
  }
  const opened = arrivedAt && arrivedAt.match(/^#\/orders\/(.+)$/);
  arrivedAt = at;
  if (order) {
    if (message) document.querySelector(`[data-testid=${message.for}-result]`)?.focus();
    else document.getElementById("order-heading").focus();
  } else if (at === "#/resubmit") {
    document.getElementById("bulk-heading").focus();
  } else if (at === "#/cancel") {
    document.getElementById("bulk-cancel-heading").focus();
  } else if (search) {
    (main.querySelector("[data-testid=search-results] a") ||
     document.getElementById("search-q")).focus();
  } else if (message) {  // an action on the overview: on what it came to
    document.querySelector(`[data-testid=${message.for}-result]`)?.focus();
  } else if (opened) {
    main.querySelector(`a[data-order="${CSS.escape(decodeURIComponent(opened[1]))}"]`)?.focus();
  }
}

// A search: the orders whose id starts with the text and the customer's orders (of the
// state, if one is chosen); with no text, the orders of the state.
async function find(q, state) {
  const s = state ? "&state=" + encodeURIComponent(state) : "";
  // More than one page matched (a continuation), or the search by customer stopped at its
  // cap: said under the results, so that they do not pass for all there are.
  const more = page => Boolean(page.continuation || page.truncated);
  if (!q) {
    const page = await api(`/orders?limit=50${s}`);
    return {orders: page.orders, more: more(page)};
  }
  const asked = [api(`/orders?limit=50&prefix=${encodeURIComponent(q)}${s}`),
                 api(`/orders?limit=50&customer=${encodeURIComponent(q)}${s}`)];
  const answers = await Promise.allSettled(asked);
  const seen = new Map();
  for (const a of answers) if (a.status === "fulfilled")
    for (const o of a.value.orders) seen.set(o.OrderID, o);
  // One of the two may refuse the text (a customer's name is no order id): the other answers.
  if (answers.every(a => a.status === "rejected")) throw answers[0].reason;
  return {orders: [...seen.values()],
          more: answers.some(a => a.status === "fulfilled" && more(a.value))};
}

function renderSearch(params, found) {
  const q = params.get("q") || "", state = params.get("state") || "";
  const what = [q && `"${q}" (order id or customer)`, state && `state ${state}`]
    .filter(Boolean).join(", ");
  main.replaceChildren(
    el("section", {}, el("h2", {}, "Search ", el("small", {text: what})),
      table("search-results", ["order", "state", "step", "last error", "updated"],
        found.orders, r => el("tr", {"data-order": r.OrderID},
          cell(orderLink(r.OrderID), "id"),
          cell(r.ProcessState + (r.Compensation ? ` / compensation ${r.Compensation}` : "")),
          cell(r.FailedStep || r.CurrentStep), cell(r.LastError), cell(when(r.UpdatedAt)))),
      found.more ? el("p", {class: "more", role: "status",
                            text: "More orders may match than are shown here: the search " +
                                  "shows the first 50 it finds."}) : null));
}

// Bulk resubmit: failed orders picked by when they failed and at which step. A dry run first
// (POST /api/resubmissions is one unless dry_run is false), which shows what each order would
// come to; only then a confirmation, for the same filters, resubmits them, each as a single
// resubmit is, the signed-in operator in its history. Changing a filter drops the dry run: what
// is confirmed is always what was shown.
function renderBulk() {
  const field = (label, input) => el("label", {}, label, " ", input);
  const steps = el("datalist", {id: "bulk-steps"},
                   ...failedSteps.map(step => el("option", {value: step})));
  const form = el("form", {"data-testid": "bulk-form", class: "bulk-form"},
    field("Failed since", el("input", {type: "datetime-local", name: "since"})),
    field("Failed before", el("input", {type: "datetime-local", name: "until"})),
    field("Failed at step", el("input", {name: "failed_step", list: "bulk-steps",
                                         maxlength: "128", autocomplete: "off"})), steps,
    field("At most", el("input", {type: "number", name: "limit", min: "1", max: "100",
                                  value: "50", required: ""})),
    el("label", {class: "wide"}, "Reason (kept in each order's history)",
       el("textarea", {name: "reason", rows: "2", maxlength: "1000"})),
    el("label", {class: "notice wide"}, el("input", {type: "checkbox", name: "force"}),
       " Also orders whose compensation failed: I have checked the services"),
    el("button", {type: "submit", "data-testid": "bulk-dry-run", text: "Dry run"}));
  const plan = el("div", {"data-testid": "bulk-plan", class: "bulk-plan"});
  const section = el("section", {"data-testid": "bulk"},
    el("h2", {id: "bulk-heading", tabindex: "-1"}, "Resubmit failed orders ",
       el("small", {text: "Escape: back"})),
    el("p", {class: "empty", text: "Failed orders (Error) picked by when they failed (your " +
      "time) and at which step, newest failure first, at most 100 at a time. A dry run says " +
      "what each would come to and changes nothing; then you confirm. Resubmitted as you."}),
    form, plan);
  form.oninput = () => plan.replaceChildren();  // a plan holds only for the filters it ran on
  form.onsubmit = async ev => {
    ev.preventDefault();
    const ask = bulkAsk(form);
    let result;
    try {
      result = await api("/resubmissions", {method: "POST",
        headers: {"content-type": "application/json"},
        body: JSON.stringify(Object.assign({}, ask, {dry_run: true}))});
    } catch (e) {
      return bulkSaid(plan, String(e.message || e));
    }
    drawPlan(plan, ask, result);
  };
  main.replaceChildren(section);
}

function bulkAsk(form) {
  const f = new FormData(form);
  // A datetime-local is the viewer's own time: sent as UTC (the API needs the zone).
  const at = name => f.get(name) ? new Date(String(f.get(name))).toISOString() : null;
  return {since: at("since"), until: at("until"),
          failed_step: String(f.get("failed_step") || "").trim() || null,
          reason: String(f.get("reason") || ""), force: f.get("force") === "on",
          limit: Number(f.get("limit") || 50)};
}

function bulkSaid(plan, text, testid = "bulk-result") {
  plan.replaceChildren(el("p", {class: "error", "data-testid": testid, tabindex: "-1", text}));
  plan.firstChild.focus();
}

function bulkTable(items) {
  return table("bulk-items", ["order", "failed step", "failed", "outcome", "why / last error"],
    items, i => el("tr", {"data-order": i.OrderID, class: i.Outcome === "refused" ? "refused" : ""},
      cell(orderLink(i.OrderID), "id"), cell(i.FailedStep), cell(when(i.UpdatedAt)),
      cell(i.Outcome, "outcome"), cell(i.Why || i.LastError)));
}

function drawPlan(plan, ask, result) {
  const go = result.Items.filter(i => i.Outcome !== "refused");
  const refused = result.Items.length - go.length;
  const more = result.More ? el("p", {class: "notice", "data-testid": "bulk-more",
    text: "More orders match than this batch: run it again once these are done."}) : null;
  // Orders a resubmit would refuse are not picked (they would fill every batch): said apart.
  const n = result.Skipped || 0;
  const skipped = n ? el("p", {class: "notice", "data-testid": "bulk-skipped",
    text: `${n} more failed order${n === 1 ? "" : "s"} match${n === 1 ? "es" : ""} that a ` +
          "resubmit would refuse, so not picked: a failed compensation (tick \"Also orders " +
          "whose compensation failed\" once you have checked the services), or one still " +
          "being compensated."}) : null;
  const heading = el("h2", {id: "bulk-plan-heading", tabindex: "-1",
    text: `Dry run: ${go.length} would be resubmitted, ${refused} refused ` +
          "(nothing was changed)"});
  const confirm = go.length ? el("button", {type: "button", "data-testid": "bulk-confirm",
    text: `Resubmit ${go.length} order${go.length === 1 ? "" : "s"}`}) : null;
  if (confirm) confirm.onclick = async () => {
    confirm.disabled = true;  // once: a second click would be a second batch
    // Pinned to what the dry run showed: an order failing since (newer than the newest shown)
    // is not swept in. `until` is exclusive, so just after the newest one shown.
    const newest = Math.max(...result.Items.map(i => Date.parse(i.UpdatedAt)));
    const until = new Date(newest + 1).toISOString();
    const pinned = Object.assign({}, ask, {dry_run: false,
      until: ask.until && ask.until < until ? ask.until : until});
    let done;
    try {
      done = await api("/resubmissions", {method: "POST",
        headers: {"content-type": "application/json"}, body: JSON.stringify(pinned)});
    } catch (e) {
      return bulkSaid(plan, String(e.message || e));
    }
    const ok = done.Items.filter(i => i.Outcome === "resubmitted").length;
    plan.replaceChildren(
      el("h2", {id: "bulk-done-heading", tabindex: "-1", "data-testid": "bulk-result",
                text: `Resubmitted ${ok}, refused ${done.Items.length - ok}`}),
      bulkTable(done.Items));
    document.getElementById("bulk-done-heading").focus();
  };
  plan.replaceChildren(...[heading, bulkTable(result.Items), skipped, more,
    confirm ? el("p", {}, confirm, " ", el("span", {class: "empty",
      text: "each as a single resubmit, your name in its history"})) : null].filter(Boolean));
  heading.focus();
}

// Bulk cancel: running orders (Pending, Processing or both, or Parked ones when asked for)
// picked by the start of their id, newest first. As bulk resubmit: a dry run first (POST /api/cancellations is one unless
// dry_run is false) that changes nothing, then a confirmation for what it showed; changing a
// filter drops the dry run.
function renderBulkCancel() {
  const field = (label, input) => el("label", {}, label, " ", input);
  const form = el("form", {"data-testid": "bulk-cancel-form", class: "bulk-form"},
    field("State", el("select", {name: "state"},
      el("option", {value: "", text: "Pending or Processing"}),
      ...CANCELLABLE.map(s => el("option", {value: s, text: s})))),
    field("Order id starts with", el("input", {name: "prefix", maxlength: "149",
                                               autocomplete: "off"})),
    field("At most", el("input", {type: "number", name: "limit", min: "1", max: "100",
                                  value: "50", required: ""})),
    el("label", {class: "wide"}, "Reason (kept with each order)",
       el("textarea", {name: "reason", rows: "2", maxlength: "1000", "aria-required": "true"})),
    el("button", {type: "submit", "data-testid": "bulk-cancel-dry-run", text: "Dry run"}));
  const plan = el("div", {"data-testid": "bulk-cancel-plan", class: "bulk-plan"});
  const section = el("section", {"data-testid": "bulk-cancel"},
    el("h2", {id: "bulk-cancel-heading", tabindex: "-1"}, "Cancel running orders ",
       el("small", {text: "Escape: back"})),
    el("p", {class: "empty", text: "Orders still running (Pending or Processing; Parked " +
      "ones, waiting for a person, when picked), newest first, at most 100 at a time: nothing more is sent for each and its work is undone. A " +
      "dry run says what each would come to and changes nothing; then you confirm. Cancelled " +
      "as you."}),
    form, plan);
  form.oninput = () => plan.replaceChildren();  // a plan holds only for the filters it ran on
  form.onsubmit = async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    const ask = {state: String(f.get("state") || "") || null,
                 prefix: String(f.get("prefix") || "").trim() || null,
                 reason: String(f.get("reason") || ""), limit: Number(f.get("limit") || 50)};
    if (!ask.reason.trim())  // refused here: nothing is sent
      return bulkSaid(plan, "Say why they are cancelled: a cancel needs a reason.",
                      "bulk-cancel-result");
    let result;
    try {
      result = await api("/cancellations", {method: "POST",
        headers: {"content-type": "application/json"},
        body: JSON.stringify(Object.assign({}, ask, {dry_run: true}))});
    } catch (e) {
      return bulkSaid(plan, String(e.message || e), "bulk-cancel-result");
    }
    drawCancelPlan(plan, ask, result);
  };
  main.replaceChildren(section);
}

function cancelTable(items) {
  return table("bulk-cancel-items", ["order", "updated", "compensation", "outcome", "why"],
    items, i => el("tr", {"data-order": i.OrderID, class: i.Outcome === "refused" ? "refused" : ""},
      cell(orderLink(i.OrderID), "id"), cell(when(i.UpdatedAt)), cell(i.Compensation),
      cell(i.Outcome, "outcome"), cell(i.Why)));
}

function drawCancelPlan(plan, ask, result) {
  const go = result.Items.filter(i => i.Outcome !== "refused");
  const refused = result.Items.length - go.length;
  const more = result.More ? el("p", {class: "notice", "data-testid": "bulk-cancel-more",
    text: "More orders match than this batch: run it again once these are done."}) : null;
  const heading = el("h2", {id: "bulk-cancel-plan-heading", tabindex: "-1",
    text: `Dry run: ${go.length} would be cancelled, ${refused} refused ` +
          "(nothing was changed)"});
  const confirm = go.length ? el("button", {type: "button", "data-testid": "bulk-cancel-confirm",
    text: `Cancel ${go.length} order${go.length === 1 ? "" : "s"}`}) : null;
  if (confirm) confirm.onclick = async () => {
    confirm.disabled = true;  // once: a second click would be a second batch
    let done;
    try {
      // Pinned to what the dry run showed: the orders are picked by when they were received,
      // newest first, so no more of them than it showed, received from its oldest to its
      // newest (inclusive): an order received since is not swept in.
      const received = async i => Date.parse(
        (await api("/orders/" + encodeURIComponent(i.OrderID))).CreatedAt);
      const items = result.Items;
      const [newest, oldest] = await Promise.all([received(items[0]),
                                                  received(items[items.length - 1])]);
      const pinned = Object.assign({}, ask, {dry_run: false, limit: items.length,
        since: new Date(oldest).toISOString(), until: new Date(newest + 1).toISOString()});
      done = await api("/cancellations", {method: "POST",
        headers: {"content-type": "application/json"}, body: JSON.stringify(pinned)});
    } catch (e) {
      return bulkSaid(plan, String(e.message || e), "bulk-cancel-result");
    }
    const ok = done.Items.filter(i => i.Outcome === "cancelled").length;
    plan.replaceChildren(
      el("h2", {id: "bulk-cancel-done-heading", tabindex: "-1",
                "data-testid": "bulk-cancel-result",
                text: `Cancelled ${ok}, refused ${done.Items.length - ok}`}),
      cancelTable(done.Items));
    document.getElementById("bulk-cancel-done-heading").focus();
  };
  plan.replaceChildren(...[heading, cancelTable(result.Items), more,
    confirm ? el("p", {}, confirm, " ", el("span", {class: "empty",
      text: "each as a single cancel, your name kept with it"})) : null].filter(Boolean));
  heading.focus();
}

function schedule() {
  clearInterval(timer);
  // Live only while someone looks, and not while a form (resubmit, resume, cancel, bulk, pause,
  // re-drive) is on the page: it is being filled in. A search's answer stays as it was (a search by
  // customer reads the table: once per asking).
  timer = setInterval(() => {
    const typing = main.querySelector("form");
    const searching = location.hash.startsWith("#/search?");
    if (document.getElementById("live").checked && !document.hidden && !typing && !searching)
      show();
  }, 5000);
}

document.getElementById("home").onclick = ev => { ev.preventDefault(); location.hash = ""; };
document.getElementById("search").onsubmit = ev => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const q = String(f.get("q") || "").trim(), state = String(f.get("state") || "");
  if (!q && !state) { location.hash = ""; return; }
  const next = "#/search?" + new URLSearchParams({q, state}).toString();
  if (location.hash === next) show(); else location.hash = next;
};
// Escape closes an order's page (back to the list it came from), then a search (back to the
// overview). In a field with something typed, it only leaves the field.
document.addEventListener("keydown", ev => {
  if (ev.key !== "Escape") return;
  const f = document.activeElement;
  if (f && (f.tagName === "TEXTAREA" || f.tagName === "INPUT") && f.value &&
      f.type !== "checkbox") { f.blur(); return; }
  if (location.hash.startsWith("#/orders/")) location.hash = listHash;
  else if (location.hash.startsWith("#/search?") || location.hash === "#/resubmit" ||
           location.hash === "#/cancel")
    location.hash = "";
});
document.getElementById("zone").textContent =
  "times in " + Intl.DateTimeFormat().resolvedOptions().timeZone + " (UTC on hover)";
window.addEventListener("hashchange", () => show());
show();
schedule();
