"""The operator console: HTML pages rendered on the server, at `/` of
`wf-rpc-server` beside `/rpc`, `/healthz` and `/metrics`.

Pages (GET): `/` the overview, `/schedules` the list (filter by state, sort
by next or last), `/schedules/{id}` one schedule (definition, revisions,
next instants, timeline, ledger), `/runs` the list, `/runs/{id}` one run.
Actions (POST, see `security.py`): `/schedules/{id}/pause`,
`/schedules/{id}/resume`, `/runs/{id}/resume`. `/login` and `/logout` when
the server has a token. `/static/...` the stylesheet and the small refresh
script, served from the package (nothing is fetched from elsewhere).

Everything is read through the server's API (`server.api`, its `schedules`)
and the store ports behind it, so the console works on every store backend.
No scheduling rule lives here: the console shows what the API answers, and
its actions are the API's calls, whose domain errors it shows as they are.
Each response carries `Server-Timing: app;dur=<ms>`: how long the server
took (the benchmark `bench/console.py` reads it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from adapters.console.catalog import CatalogEntry, ScheduleCatalog
from adapters.console.present import (
    backfill_progress,
    css_class,
    duration_text,
    instant_in_zone,
    next_instants,
    origin_label,
    parse_utc,
    reason_text,
    relative_text,
    seconds_between,
    trigger_words,
)
from adapters.console.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    ConsoleGuard,
    safe_next,
)
from adapters.console.timeline import build_timeline, paused_spans
from core.errors import InvalidInput, Problem, SchedulingError
from core.schedule_state import LIFECYCLE_STATES

__all__ = ["Console", "console_routes"]

_log = logging.getLogger("adapters.console")

_PAGE: Final = 100
_LEDGER_PAGE: Final = 50
_RUNS_PAGE: Final = 50
# The timeline reads at most this many of the newest occurrences: an
# every-minute schedule has 10,080 in a week, more than a page should read.
_TIMELINE_ROWS: Final = 600
_REFRESH_S: Final = 10
_RESUME_WAIT_S: Final = 2.0
_MAX_FORM_BYTES: Final = 1_048_576
_HTTP_STATUS: Final[Mapping[str, int]] = {
    "not_found": 404,
    "invalid_input": 400,
    "invalid_definition": 400,
    "invalid_state": 409,
    "revision_conflict": 409,
    "scheduler_unavailable": 503,
    "store_fenced": 503,
    "store_unavailable": 503,
}
_ABANDONED_KINDS: Final = frozenset({"abandoned", "ambiguous-resume"})


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _utc_text(value: Any) -> str:
    parsed = parse_utc(value)
    return parsed.strftime("%Y-%m-%d %H:%M:%SZ") if parsed is not None else "-"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("adapters.console", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["status_class"] = css_class
    env.filters["pretty"] = _json
    env.filters["utc"] = _utc_text
    env.filters["words"] = trigger_words
    env.globals["states"] = LIFECYCLE_STATES
    return env


class _Refused(Exception):
    """An action the console refuses before calling the API (bad form)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Console:
    """The console of one server. `api` is the server's API (`server.api`),
    `health` its health reporter, `token` the server's token (None: none),
    `now` its clock. `attach_service` gives it the scheduler service (slots)."""

    def __init__(
        self,
        api: Any,
        *,
        health: Callable[[], Mapping[str, Any]],
        token: str | None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.api = api
        self.health = health
        self.guard = ConsoleGuard(token)
        self.now = now or (lambda: datetime.now(UTC))
        schedules = getattr(api, "schedules", None)
        self.catalog = ScheduleCatalog(schedules, now=self.now) if schedules is not None else None
        self.service: Any = None
        self._env = _environment()
        self._static = {
            name: (resources.files("adapters.console").joinpath("static", name).read_bytes(), kind)
            for name, kind in (
                ("console.css", "text/css; charset=utf-8"),
                ("console.js", "text/javascript; charset=utf-8"),
            )
        }

    def attach_service(self, service: Any) -> None:
        """The scheduler service whose slots the overview shows."""
        self.service = service

    def watch(self, api: Any) -> None:
        """Renew a schedule's catalog entry first once one of its runs changes
        status (the host's run reports)."""
        if self.catalog is None:
            return
        catalog = self.catalog

        def on_run_status(
            run_id: str, status: str, origin: Mapping[str, Any] | None, message: str | None
        ) -> None:
            del run_id, status, message
            if origin is not None and origin.get("kind") == "schedule":
                catalog.touch([str(origin.get("schedule_id"))])

        api.add_run_listener(on_run_status)

    def decided(self, decisions: Sequence[Any]) -> None:
        """The scheduler made these decisions durable: renew their schedules first."""
        if self.catalog is not None:
            self.catalog.touch(d.schedule_id for d in decisions)

    def schedule_counts(self) -> Mapping[str, int] | None:
        """Schedules by state as the catalog last read them (the gauge's source)."""
        if self.catalog is None:
            return None
        snapshot = self.catalog.peek()
        return snapshot.counts() if snapshot.as_of is not None else None

    async def close(self) -> None:
        if self.catalog is not None:
            await self.catalog.close()

    # --- plumbing ----------------------------------------------------------------

    def routes(self) -> list[Route]:
        page = self._page
        return [
            Route("/", page(self.overview), methods=["GET"]),
            Route("/schedules", page(self.schedules), methods=["GET"]),
            Route("/schedules/{schedule_id}", page(self.schedule), methods=["GET"]),
            Route(
                "/schedules/{schedule_id}/pause",
                self._action(self.pause),
                methods=["POST"],
            ),
            Route(
                "/schedules/{schedule_id}/resume",
                self._action(self.resume),
                methods=["POST"],
            ),
            Route("/runs", page(self.runs), methods=["GET"]),
            Route("/runs/{run_id}", page(self.run), methods=["GET"]),
            Route("/runs/{run_id}/resume", self._action(self.resume_run), methods=["POST"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/static/{name}", self.static, methods=["GET"]),
        ]

    def _render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        status: int = 200,
        began: float | None = None,
    ) -> Response:
        csrf = self.guard.csrf_cookie(request) or self.guard.new_csrf()
        now = self.now()
        body = self._env.get_template(template).render(
            {
                "request": request,
                "csrf_field": CSRF_FIELD,
                "csrf": csrf,
                "signed_in": self.guard.needs_login and self.guard.signed_in(request),
                "now": now,
                "now_text": now.strftime("%Y-%m-%d %H:%M:%SZ"),
                "refresh_s": _REFRESH_S,
                "path": request.url.path,
                **context,
            }
        )
        response = HTMLResponse(body, status_code=status)
        if self.guard.csrf_cookie(request) != csrf:
            response.set_cookie(
                CSRF_COOKIE, csrf, httponly=True, samesite="strict", path="/", max_age=86400 * 30
            )
        response.headers["Cache-Control"] = "no-store"
        if began is not None:
            response.headers["Server-Timing"] = (
                f"app;dur={(time.perf_counter() - began) * 1000:.1f}"
            )
        return response

    def _gate(self, request: Request) -> Response | None:
        """A refusal (403) or a redirect to the login form, or None: go on."""
        if self.guard.foreign_host(request):
            return Response(
                "forbidden: this server has no token and only answers loopback Host names",
                status_code=403,
                media_type="text/plain",
            )
        if not self.guard.signed_in(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)
        return None

    def _error_page(
        self, request: Request, exc: SchedulingError, began: float, *, title: str
    ) -> Response:
        problems = [
            {"field": p.field, "reason": p.reason} for p in getattr(exc, "problems", ()) or ()
        ]
        return self._render(
            request,
            "error.html",
            {"title": title, "code": exc.code, "message": exc.message, "problems": problems},
            status=_HTTP_STATUS.get(exc.code, 400),
            began=began,
        )

    def _page(
        self, handler: Callable[[Request, float], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            began = time.perf_counter()
            refused = self._gate(request)
            if refused is not None:
                return refused
            try:
                return await handler(request, began)
            except SchedulingError as exc:
                return self._error_page(request, exc, began, title="Refused")

        return endpoint

    def _action(
        self, handler: Callable[[Request, Mapping[str, str], float], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            began = time.perf_counter()
            refused = self._gate(request)
            if refused is not None:
                return refused
            try:
                form = await self._form(request)
                if not self.guard.same_origin(request):
                    raise _Refused(403, "refused: the form was not sent from a page of this server")
                if not self.guard.csrf_matches(request, form.get(CSRF_FIELD)):
                    raise _Refused(
                        403,
                        "refused: the form's anti-forgery field does not match this browser's"
                        " (reload the page and try again)",
                    )
                return await handler(request, form, began)
            except _Refused as exc:
                return self._render(
                    request,
                    "error.html",
                    {"title": "Refused", "code": "forbidden", "message": exc.message},
                    status=exc.status,
                    began=began,
                )
            except SchedulingError as exc:
                return self._error_page(request, exc, began, title="Refused")

        return endpoint

    async def _form(self, request: Request) -> dict[str, str]:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise _Refused(415, "refused: send the form as application/x-www-form-urlencoded")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:
                raise _Refused(413, f"refused: a form is at most {_MAX_FORM_BYTES} bytes")
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise _Refused(400, "refused: the form is not UTF-8") from None
        return {key: values[-1] for key, values in parsed.items()}

    async def static(self, request: Request) -> Response:
        found = self._static.get(request.path_params["name"])
        if found is None:
            return Response("not found", status_code=404, media_type="text/plain")
        content, kind = found
        return Response(content, media_type=kind, headers={"Cache-Control": "max-age=300"})

    # --- login -------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        if self.guard.foreign_host(request):
            return Response("forbidden", status_code=403, media_type="text/plain")
        return self._render(
            request,
            "login.html",
            {
                "title": "Sign in",
                "next": safe_next(request.query_params.get("next")),
                "error": None,
            },
        )

    async def login(self, request: Request) -> Response:
        try:
            form = await self._form(request)
        except _Refused as exc:
            return Response(exc.message, status_code=exc.status, media_type="text/plain")
        target = safe_next(form.get("next"))
        if not self.guard.needs_login:
            return RedirectResponse(target, status_code=303)
        if not self.guard.same_origin(request) or not self.guard.token_matches(
            form.get("token", "")
        ):
            _log.warning(
                "console: a sign-in was refused (wrong token or foreign origin)",
                extra={"event": "console.login_refused"},
            )
            return self._render(
                request,
                "login.html",
                {"title": "Sign in", "next": target, "error": "That token is not this server's."},
                status=401,
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.guard.session_value(),
            httponly=True,
            samesite="strict",
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    # --- the pages ------------------------------------------------------------------

    def _slots(self) -> dict[str, Any] | None:
        service = self.service
        if service is None or not getattr(service, "running", False):
            return None
        state = service.state
        return {"used": state.slots_in_use, "bound": state.max_concurrent_runs}

    async def overview(self, request: Request, began: float) -> Response:
        try:
            health: Mapping[str, Any] = dict(self.health())
        except Exception:
            _log.exception("console: the health reporter failed")
            health = {"status": "error"}
        counts: dict[str, int] | None = None
        blocked: list[CatalogEntry] = []
        as_of: str | None = None
        if self.catalog is not None:
            snapshot = await self.catalog.snapshot()
            counts = snapshot.counts()
            blocked = sorted(
                (e for e in snapshot.entries.values() if e.state == "blocked"),
                key=lambda e: e.schedule_id,
            )
            as_of = (
                _utc_text(snapshot.as_of.strftime("%Y-%m-%dT%H:%M:%SZ")) if snapshot.as_of else None
            )
        page = await self.api.list_runs(status="failed", limit=20, newest_first=True)
        failed: list[dict[str, Any]] = []
        abandoned: list[dict[str, Any]] = []
        for run in page["runs"]:
            kind = (run.get("error") or {}).get("kind")
            (abandoned if kind in _ABANDONED_KINDS else failed).append(self._run_row(run))
        return self._render(
            request,
            "overview.html",
            {
                "title": "Overview",
                "health": health,
                "slots": self._slots(),
                "counts": counts,
                "blocked": blocked[:50],
                "blocked_total": len(blocked),
                "as_of": as_of,
                "failed": failed[:10],
                "abandoned": abandoned[:10],
                "refresh": True,
            },
            began=began,
        )

    def _schedule_row(self, entry: CatalogEntry, now: datetime) -> dict[str, Any]:
        schedule = entry.schedule
        trigger = schedule.get("trigger")
        zone = trigger.get("timezone", "UTC") if isinstance(trigger, Mapping) else "UTC"
        upcoming = parse_utc(schedule.get("next_instant"))
        if upcoming is not None and upcoming <= now:
            # The catalog read it a while ago: the next one after now.
            ahead = next_instants(schedule, now, 1)
            upcoming = parse_utc(ahead[0]["utc"].replace(" ", "T")) if ahead else None
        last = entry.last
        last_at = parse_utc(last.get("instant")) if last else None
        return {
            "id": entry.schedule_id,
            "deployment": schedule.get("deployment_id", "-"),
            "trigger": trigger,
            "state": entry.state,
            "overlap": schedule.get("overlap", "-"),
            "max_active_runs": schedule.get("max_active_runs"),
            "misfire": schedule.get("misfire", "-"),
            "revision": schedule.get("revision", "-"),
            "next_local": instant_in_zone(upcoming, zone) if upcoming else None,
            "next_utc": upcoming.strftime("%Y-%m-%d %H:%M:%SZ") if upcoming else None,
            "next_relative": relative_text(upcoming, now) if upcoming else None,
            "last": last,
            "last_local": instant_in_zone(last_at, zone) if last_at else None,
            "last_relative": relative_text(last_at, now) if last_at else None,
            "error": entry.error,
        }

    async def schedules(self, request: Request, began: float) -> Response:
        if self.catalog is None:
            return self._no_scheduler(request, began)
        params = request.query_params
        state = params.get("state") or None
        sort = params.get("sort") or "id"
        problems: list[Problem] = []
        if state is not None and state not in LIFECYCLE_STATES:
            problems.append(
                Problem(field="state", reason=f"must be one of {', '.join(LIFECYCLE_STATES)}")
            )
        if sort not in ("id", "next", "last"):
            problems.append(Problem(field="sort", reason="must be id, next or last"))
        raw_page = params.get("page", "1")
        if not raw_page.isdigit() or int(raw_page) < 1:
            problems.append(Problem(field="page", reason="must be a whole number from 1"))
        if problems:
            raise InvalidInput.from_problems("schedules page", problems)
        number = int(raw_page)
        snapshot = await self.catalog.snapshot()
        now = self.now()
        entries = [e for e in snapshot.entries.values() if state is None or e.state == state]
        far = datetime.max.replace(tzinfo=UTC)
        if sort == "next":
            entries.sort(
                key=lambda e: (parse_utc(e.schedule.get("next_instant")) or far, e.schedule_id)
            )
        elif sort == "last":
            floor = datetime.min.replace(tzinfo=UTC)

            def newest(e: CatalogEntry) -> datetime:
                return (parse_utc(e.last.get("instant")) if e.last else None) or floor

            entries.sort(key=lambda e: (newest(e), e.schedule_id), reverse=True)
        else:
            entries.sort(key=lambda e: e.schedule_id)
        total = len(entries)
        pages = max(1, -(-total // _PAGE))
        shown = entries[(number - 1) * _PAGE : number * _PAGE]
        rows = [self._schedule_row(e, now) for e in shown]

        def link(**changes: Any) -> str:
            query = {"state": state, "sort": sort, "page": number, **changes}
            return "/schedules?" + urlencode({k: v for k, v in query.items() if v})

        return self._render(
            request,
            "schedules.html",
            {
                "title": "Schedules",
                "rows": rows,
                "state": state,
                "sort": sort,
                "page": number,
                "pages": pages,
                "total": total,
                "counts": snapshot.counts(),
                "as_of": _utc_text(snapshot.as_of.strftime("%Y-%m-%dT%H:%M:%SZ"))
                if snapshot.as_of
                else None,
                "renewing": snapshot.renewing,
                "link": link,
                "refresh": True,
            },
            began=began,
        )

    def _no_scheduler(self, request: Request, began: float) -> Response:
        return self._render(
            request,
            "error.html",
            {
                "title": "Schedules",
                "code": "scheduler_unavailable",
                "message": "scheduling is not enabled on this server (start it with"
                " --enable-scheduler)",
            },
            status=503,
            began=began,
        )

    async def _revisions(self, schedule_id: str) -> list[dict[str, Any]]:
        """The lifecycle records newest first, each update with the fields it
        changed (who changed it is not recorded; when is)."""
        records = await self.api.schedules.definitions.records_after(schedule_id, 0)
        shown: list[dict[str, Any]] = []
        previous: Mapping[str, Any] | None = None
        for record in records:
            definition = record.get("definition")
            changes: list[dict[str, Any]] = []
            if isinstance(definition, Mapping):
                if previous is not None:
                    for key in sorted(set(definition) | set(previous)):
                        if definition.get(key) != previous.get(key):
                            changes.append(
                                {
                                    "field": key,
                                    "before": _json(previous.get(key)),
                                    "after": _json(definition.get(key)),
                                }
                            )
                previous = definition
            shown.append(
                {
                    "seq": record.get("seq"),
                    "kind": record.get("kind"),
                    "revision": record.get("revision"),
                    "at": _utc_text(record.get("at")),
                    "changes": changes,
                }
            )
        shown.reverse()
        return shown

    async def _window_rows(
        self,
        schedule_id: str,
        first_page: Sequence[Mapping[str, Any]],
        cursor: str | None,
        since: datetime,
    ) -> tuple[list[Mapping[str, Any]], datetime | None]:
        """The rows of the last week (newest first), reading on from the
        ledger's first page; and, when the budget ran out before the week's
        start, the instant the rows reach back to."""
        rows = [r for r in first_page if r.get("status") != "pending"]
        while cursor is not None and len(rows) < _TIMELINE_ROWS:
            oldest = parse_utc(rows[-1].get("instant")) if rows else None
            if oldest is not None and oldest < since:
                break
            page = await self.api.schedules.list_schedule_occurrences(
                schedule_id=schedule_id, limit=100, cursor=cursor, newest_first=True
            )
            rows.extend(page["occurrences"])
            cursor = page["next_cursor"]
        reach: datetime | None = None
        if cursor is not None and rows:
            oldest = parse_utc(rows[-1].get("instant"))
            if oldest is not None and oldest > since:
                reach = oldest
        return rows, reach

    async def schedule(self, request: Request, began: float) -> Response:
        if self.catalog is None:
            return self._no_scheduler(request, began)
        schedule_id = request.path_params["schedule_id"]
        schedules = self.api.schedules
        schedule = await schedules.get_schedule(schedule_id=schedule_id)
        now = self.now()
        cursor = request.query_params.get("cursor") or None
        ledger_error: SchedulingError | None = None
        try:
            ledger = await schedules.list_schedule_occurrences(
                schedule_id=schedule_id, limit=_LEDGER_PAGE, cursor=cursor, newest_first=True
            )
        except SchedulingError as exc:
            if cursor is not None and exc.code == "invalid_input":
                raise
            # A damaged history: the schedule is shown, its ledger says why not.
            ledger, ledger_error = {"occurrences": [], "next_cursor": None}, exc
        trigger = schedule.get("trigger")
        zone = trigger.get("timezone", "UTC") if isinstance(trigger, Mapping) else "UTC"
        rows = []
        for row in ledger["occurrences"]:
            instant = parse_utc(row.get("instant"))
            rows.append(
                {
                    **row,
                    "local": instant_in_zone(instant, zone) if instant else "-",
                    "relative": relative_text(instant, now) if instant else "-",
                    "why": reason_text(row, schedule),
                    "origin_label": origin_label(row),
                }
            )
        week = now - timedelta(days=7)
        day = now - timedelta(days=1)
        timelines: list[dict[str, str]] = []
        if cursor is None and ledger_error is None:
            window, reach = await self._window_rows(
                schedule_id, ledger["occurrences"], ledger["next_cursor"], week
            )
            records = await schedules.definitions.records_after(schedule_id, 0)
            paused = paused_spans(records, now)
            for label, start in (("the last day", day), ("the last week", week)):
                timelines.append(
                    {
                        "label": label,
                        "svg": build_timeline(
                            title=f"{schedule_id}: {label}",
                            start=start,
                            end=now,
                            rows=window,
                            paused=paused,
                            complete_from=reach,
                        ),
                    }
                )
        if self.catalog is not None:
            self.catalog.touch([schedule_id])
        return self._render(
            request,
            "schedule.html",
            {
                "title": f"Schedule {schedule_id}",
                "s": schedule,
                "zone": zone,
                "words": trigger_words(trigger),
                "upcoming": next_instants(schedule, now, 10),
                "backfill": backfill_progress(schedule.get("backfill"), zone, now),
                "revisions": await self._revisions(schedule_id),
                "rows": rows,
                "next_cursor": ledger["next_cursor"],
                "first_page": cursor is None,
                "ledger_error": ledger_error,
                "timelines": timelines,
                "notice": request.query_params.get("done"),
                "refresh": cursor is None,
            },
            began=began,
        )

    def _run_row(self, run: Mapping[str, Any]) -> dict[str, Any]:
        origin = run.get("origin") or {}
        scheduled = isinstance(origin, Mapping) and origin.get("kind") == "schedule"
        stopped = run.get("status") in ("completed", "failed", "exhausted", "interrupted")
        return {
            "id": run.get("run_id"),
            "status": run.get("status"),
            "schedule_id": origin.get("schedule_id") if scheduled else None,
            "instant": _utc_text(origin.get("instant")) if scheduled else None,
            # An operator's trigger or backfill opened it: labelled as the ledger labels its row.
            "origin_label": origin_label({"origin": origin.get("action")}) if scheduled else None,
            "created": _utc_text(run.get("created_at")),
            "duration": duration_text(
                seconds_between(run.get("created_at"), run.get("updated_at"))
                if stopped
                else seconds_between(run.get("created_at"), self.now().isoformat())
            ),
            "steps": run.get("steps"),
            "error": (run.get("error") or {}).get("message"),
            "error_kind": (run.get("error") or {}).get("kind"),
        }

    async def runs(self, request: Request, began: float) -> Response:
        status = request.query_params.get("status") or None
        cursor = request.query_params.get("cursor") or None
        page = await self.api.list_runs(
            status=status, cursor=cursor, limit=_RUNS_PAGE, newest_first=True
        )
        return self._render(
            request,
            "runs.html",
            {
                "title": "Runs",
                "rows": [self._run_row(run) for run in page["runs"]],
                "status": status,
                "statuses": (
                    "admitted",
                    "running",
                    "interrupted",
                    "completed",
                    "failed",
                    "exhausted",
                ),
                "next_cursor": page["next_cursor"],
                "first_page": cursor is None,
                "refresh": cursor is None,
            },
            began=began,
        )

    async def run(self, request: Request, began: float) -> Response:
        run = await self.api.inspect_run(request.path_params["run_id"])
        error = run.get("error") or None
        return self._render(
            request,
            "run.html",
            {
                "title": f"Run {run.get('run_id')}",
                "run": run,
                "row": self._run_row(run),
                "abandoned": bool(error and error.get("kind") in _ABANDONED_KINDS),
                "payload": "",
                "form_error": None,
                "refresh": run.get("status") in ("admitted", "running"),
            },
            began=began,
        )

    # --- the actions ---------------------------------------------------------------------

    async def pause(self, request: Request, form: Mapping[str, str], began: float) -> Response:
        return await self._lifecycle(request, "pause")

    async def resume(self, request: Request, form: Mapping[str, str], began: float) -> Response:
        return await self._lifecycle(request, "resume")

    async def _lifecycle(self, request: Request, verb: str) -> Response:
        if self.catalog is None:
            raise _Refused(503, "scheduling is not enabled on this server")
        schedule_id = request.path_params["schedule_id"]
        call = getattr(self.api.schedules, f"{verb}_schedule")
        await call(schedule_id=schedule_id)
        self.catalog.touch([schedule_id])
        _log.info(
            "console: schedule %s %sd",
            schedule_id,
            verb,
            extra={"event": f"console.schedule_{verb}d", "schedule_id": schedule_id},
        )
        return RedirectResponse(f"/schedules/{schedule_id}?done={verb}d", status_code=303)

    async def resume_run(self, request: Request, form: Mapping[str, str], began: float) -> Response:
        run_id = request.path_params["run_id"]
        text = form.get("payload", "")
        try:
            payload = json.loads(text)
        except ValueError as exc:
            return await self._resume_refused(
                request,
                run_id,
                text,
                InvalidInput.from_problems(
                    "resume payload",
                    [Problem(field="payload", reason=f"is not valid JSON: {exc}")],
                ),
                began,
            )
        # resume_run answers when the run stops again, which may be much later:
        # wait a moment for a refusal (a payload its schema rejects, a run
        # that is not interrupted), then show the run as it goes on.
        task = asyncio.ensure_future(self.api.resume_run(run_id, payload))
        done, _ = await asyncio.wait({task}, timeout=_RESUME_WAIT_S)
        if task in done:
            failure = task.exception()
            if isinstance(failure, SchedulingError):
                return await self._resume_refused(request, run_id, text, failure, began)
            if failure is not None:
                raise failure
        else:
            task.add_done_callback(_log_late_failure)
        _log.info(
            "console: run %s resumed",
            run_id,
            extra={"event": "console.run_resumed", "run_id": run_id},
        )
        return RedirectResponse(f"/runs/{run_id}?done=resumed", status_code=303)

    async def _resume_refused(
        self, request: Request, run_id: str, text: str, exc: SchedulingError, began: float
    ) -> Response:
        run = await self.api.inspect_run(run_id)
        problems = [
            {"field": p.field, "reason": p.reason} for p in getattr(exc, "problems", ()) or ()
        ]
        return self._render(
            request,
            "run.html",
            {
                "title": f"Run {run_id}",
                "run": run,
                "row": self._run_row(run),
                "abandoned": False,
                "payload": text,
                "form_error": {"code": exc.code, "message": exc.message, "problems": problems},
                "refresh": False,
            },
            status=_HTTP_STATUS.get(exc.code, 400),
            began=began,
        )


def _log_late_failure(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, SchedulingError):
        _log.error("console: a resumed run failed in the server", exc_info=exc)


def console_routes(console: Console) -> list[Route]:
    """The console's routes, to mount at the root of the server's app."""
    return console.routes()
