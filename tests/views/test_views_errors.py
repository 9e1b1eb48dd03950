"""The product's own 404 and 500 pages, with DEBUG off and in the embedded demo (DEBUG on); /favicon.ico."""

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import path

TECHNICAL = b"NONE,NOARCHIVE"  # the mark of Django's technical (yellow) pages


def _crash(request):
    raise RuntimeError("a bug")


urlpatterns = [path("crash/", _crash)]


@pytest.fixture
def crashing_urls(settings):
    settings.ROOT_URLCONF = __name__


@pytest.mark.django_db
def test_it_answers_an_unknown_address_with_the_products_404_page(support_client):
    response = support_client.get("/no/such/page/")
    assert response.status_code == 404
    assert b"There is nothing at this address." in response.content


@pytest.mark.django_db
def test_it_shows_the_products_404_page_in_the_demo_too(support_client, settings):
    settings.DEBUG = True
    response = support_client.get("/no/such/page/")
    assert response.status_code == 404
    assert TECHNICAL not in response.content
    assert b"Back to the fleet" in response.content


@pytest.mark.django_db
def test_it_says_what_was_not_found_in_the_demo(support_client, settings):
    settings.DEBUG = True
    response = support_client.get("/nodes/999/")
    assert response.status_code == 404
    assert TECHNICAL not in response.content
    assert b"Node 999 is not registered." in response.content


@pytest.mark.django_db
def test_it_still_adds_the_missing_slash_in_the_demo(support_client, settings):
    settings.DEBUG = True
    response = support_client.get("/jobs")
    assert response.status_code == 301
    assert response["Location"] == "/jobs/"


@pytest.mark.django_db
def test_debug_error_pages_brings_djangos_technical_404_back(support_client, settings):
    settings.DEBUG = True
    settings.DEBUG_ERROR_PAGES = True
    assert TECHNICAL in support_client.get("/no/such/page/").content


@pytest.mark.django_db
def test_it_answers_a_crash_with_the_products_500_page(crashing_urls):
    response = Client(raise_request_exception=False).get("/crash/")
    assert response.status_code == 500
    assert b"Something went wrong on our side" in response.content


@pytest.mark.django_db
def test_it_answers_a_crash_with_the_products_500_page_in_the_demo(crashing_urls, settings):
    settings.DEBUG = True
    response = Client(raise_request_exception=False).get("/crash/")
    assert response.status_code == 500
    assert TECHNICAL not in response.content
    assert b"Something went wrong on our side" in response.content


@pytest.mark.django_db
def test_the_api_keeps_its_json_404_in_the_demo(client, settings):
    settings.DEBUG = True
    response = client.get("/api/v1/no-such-call")
    assert response.status_code == 404
    assert TECHNICAL not in response.content


def test_it_serves_a_favicon_at_the_sites_root(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].endswith("dashboard/favicon.ico")
    assert finders.find("dashboard/favicon.ico")


def test_it_refuses_a_post_to_the_favicon(client):
    assert client.post("/favicon.ico").status_code == 405


@pytest.mark.django_db
def test_every_page_links_the_favicon(support_client):
    assert b"dashboard/favicon.ico" in support_client.get("/").content


@pytest.mark.django_db
def test_the_admin_links_the_favicon(client):
    assert b"dashboard/favicon.ico" in client.get("/admin/login/").content
