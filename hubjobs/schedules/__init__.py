"""Job schedules (recurring jobs): what one is (``definition``) and when it fires
(``timing``). Its firing runs in workflows/ and activities/schedule_firing.py; the
client's side is starter/schedules.py."""
