"""UI entry point: in headless Debian chromium, log in, fill raylift_deploy's trigger form, see the run.

raylift_deploy is paused for this test (and the form's "Unpause on trigger" box unticked), so the run the
UI creates stays queued: it proves the form and its Params reach Airflow without a second real deploy
(the REST test proves a run to success). The run is then marked failed through the API. The browser's
last view is kept as a screenshot (``RAYLIFT_UI_SCREENSHOT``, default var/test-artifacts/ui-trigger.png), and the
form with its Params sections open beside it (``...-form.png``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from raylift.dag_params import SECTIONS
from tests.entrypoints.conftest import deploy_conf
from tests.fixtures.airflow_server import USERNAME, AirflowServer
from tests.fixtures.browser import headless_chromium
from tests.harness.local_stack import ROOT

pytestmark = pytest.mark.integration

SCREENSHOT = Path(os.environ.get("RAYLIFT_UI_SCREENSHOT", ROOT / "var/test-artifacts/ui-trigger.png"))
# the form with its sections open (docs/images/trigger-form.png is one of these)
FORM_SCREENSHOT = SCREENSHOT.with_name(f"{SCREENSHOT.stem}-form.png")
UI_RUN_ID = "ui_trigger_form"
# a field of each section that the form shows only while that section is open (strings: element_<name>; numbers:
# their increment button)
SECTION_PROBES = {"Where": "element_cluster_conn_id", "Model": "element_model_source", "Serving": "element_app_name",
                  "Benchmark": "number-input:element_requests_per_level:inc",
                  "Release": "number-input:element_max_regression:inc"}
WAIT_S = 60


@pytest.fixture()
def browser() -> Iterator[object]:
    with headless_chromium() as driver:
        try:
            yield driver
        finally:
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(SCREENSHOT))
            print(f"UI screenshot: {SCREENSHOT}")


def _fill(element: object, text: str) -> None:
    """Replace a React-controlled input's value the way a user does (select all, type)."""
    from selenium.webdriver.common.keys import Keys

    element.send_keys(Keys.CONTROL, "a")
    element.send_keys(Keys.DELETE)
    element.send_keys(text)


def test_trigger_form_creates_a_run_with_the_filled_params(airflow: AirflowServer, browser: object) -> None:
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    airflow.set_paused("raylift_deploy", True)
    try:
        # log in through the simple auth manager's form
        browser.get(f"{airflow.url}/auth/login?next=%2Fdags%2Fraylift_deploy")
        wait.until(ec.visibility_of_element_located((By.NAME, "username"))).send_keys(USERNAME)
        browser.find_element(By.NAME, "password").send_keys(airflow.password)
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[type=submit]"))).click()

        # open the trigger form: one accordion per Params section (raylift.dag_params.SECTIONS), one open at a time;
        # each section, opened, shows its own first Param
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-button]"))).click()

        def open_section(section: str) -> None:
            trigger = wait.until(ec.presence_of_element_located(
                (By.XPATH, f"//button[@aria-expanded][normalize-space(.)='{section}']")))
            if trigger.get_attribute("aria-expanded") != "true":
                def clicked(_: object) -> bool:  # the section opened before still animates: its body may take the click
                    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", trigger)
                    trigger.click()
                    return True

                WebDriverWait(browser, WAIT_S, ignored_exceptions=(ElementClickInterceptedException,)).until(clicked)
            wait.until(ec.visibility_of_element_located((By.ID, SECTION_PROBES[section])))

        assert list(SECTION_PROBES) == list(SECTIONS)
        for section in SECTIONS:
            open_section(section)
        open_section("Where")  # the shortest: the form's view shows every section's title below it
        top = browser.find_element(By.XPATH, "//button[normalize-space(.)='Where']")
        browser.execute_script("arguments[0].scrollIntoView({block: 'start'})", top)
        FORM_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(FORM_SCREENSHOT))
        open_section("Model")
        served_name = wait.until(ec.visibility_of_element_located((By.ID, "element_served_name")))
        _fill(browser.find_element(By.ID, "element_model_source"), deploy_conf()["model_source"])
        _fill(served_name, "ui-tiny")
        open_section("Serving")
        increment = browser.find_element(By.ID, "number-input:element_replicas:inc")
        replicas_id = increment.get_attribute("aria-controls")
        _fill(browser.find_element(By.ID, replicas_id), "2")

        # keep the DAG paused (the run stays queued), and name the run
        unpause = browser.find_element(By.XPATH, "//label[contains(., 'Unpause raylift_deploy on trigger')]")
        checkbox = unpause.find_element(By.TAG_NAME, "input")
        if checkbox.is_selected():
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", unpause)
            unpause.click()
        assert not checkbox.is_selected()
        advanced = browser.find_element(By.CSS_SELECTOR, "[id$=':trigger:advancedOptions']")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", advanced)
        advanced.click()
        _fill(wait.until(ec.visibility_of_element_located((By.NAME, "dagRunId"))), UI_RUN_ID)

        submit = browser.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", submit)
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]"))).click()

        # the UI shows the new run ...
        wait.until(ec.url_contains(f"/dags/raylift_deploy/runs/{UI_RUN_ID}"))
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), UI_RUN_ID))
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Queued"))

        # ... and the API agrees it was made by the UI with the Params typed into the form
        run = airflow.run("raylift_deploy", UI_RUN_ID)
        assert run["triggered_by"] == "ui" and run["state"] == "queued", run
        assert run["conf"]["served_name"] == "ui-tiny" and run["conf"]["replicas"] == 2, run["conf"]
        assert run["conf"]["model_source"] == deploy_conf()["model_source"]
        assert airflow.ok("GET", "/dags/raylift_deploy")["is_paused"] is True
    finally:
        if airflow.api("GET", airflow.run_path("raylift_deploy", UI_RUN_ID)).status_code == 200:
            airflow.fail_run("raylift_deploy", UI_RUN_ID)
        airflow.set_paused("raylift_deploy", False)
