"""The `concern` fixture: a part of a requirement a test does not check is its
own JUnit property, never folded into the test's evidence or verdict."""
import pytest


@pytest.mark.requirement("CONC-2")
def test_a_concern_is_recorded_as_its_own_property(concern, request):
    concern("CONC-2", "not provoked: D-Bus timeouts")
    assert ("concern", "CONC-2: not provoked: D-Bus timeouts") in request.node.user_properties


@pytest.mark.requirement("CONC-2")
def test_a_concern_for_an_id_the_test_does_not_name_is_refused(concern, request):
    with pytest.raises(ValueError, match="FLOOD-3"):
        concern("FLOOD-3", "not provoked")
    assert not [p for p in request.node.user_properties if p[0] == "concern"]
