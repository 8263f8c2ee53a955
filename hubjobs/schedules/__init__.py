"""Job schedules (recurring jobs): "back up this workspace every night at 03:00 and keep
the last 7". A schedule is a Temporal Schedule whose every firing is a job; this
package says what one is (``definition``: its id, its Temporal shape, how it is read
back) and when it fires (``timing``: cron or interval). Its firing runs in
workflows/schedule_firing.py and activities/schedule_firing.py; the client's side is
starter/schedules.py."""
