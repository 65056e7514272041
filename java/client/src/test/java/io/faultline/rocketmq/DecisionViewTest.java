package io.faultline.rocketmq;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.junit.jupiter.api.Test;

/** The decisions topic's messages, and how long each keeps its broker away. */
class DecisionViewTest {
    private static final long HOLD = 30_000;
    private static final long MAX = 600_000;

    static String message(String broker, String decision, String state, long effectiveAt, long availableFrom) {
        return "{\"scope\":\"cluster\",\"scope_key\":\"C\",\"cluster\":\"C\",\"broker_name\":\"" + broker
            + "\",\"decision\":\"" + decision + "\",\"effective_at\":" + effectiveAt + ",\"available_from\":"
            + availableFrom + ",\"reason\":\"r\",\"cause_event_id\":\"e\",\"profile\":\"rocketmq-5\""
            + (state == null ? "" : ",\"state\":\"" + state + "\"") + "}";
    }

    @Test
    void anIsolationReadLiveLastsItsWholeDurationFromWhenItWasRead() {
        // Python's held_until: its end, and at least its duration from when it was read
        assertEquals(13_000, DecisionView.heldUntil(BrokerDecision.State.ISOLATED, 1_000, 11_000, 3_000, true, HOLD, MAX));
        assertEquals(11_000, DecisionView.heldUntil(BrokerDecision.State.ISOLATED, 1_000, 11_000, 500, true, HOLD, MAX));
    }

    @Test
    void anIsolationReadWhileCatchingUpEndsWhenFaultlineSaidItEnds() {
        // the topic's state at the start: an isolation that ended while no one read is not revived
        assertEquals(11_000, DecisionView.heldUntil(BrokerDecision.State.ISOLATED, 1_000, 11_000, 50_000, false, HOLD, MAX));
        DecisionView view = new DecisionView(HOLD, MAX);
        view.apply("broker/C/b", message("b", "ISOLATE", "ISOLATED", 1_000, 11_000), 50_000, false);
        assertTrue(view.isAvailable("C", "b", 50_000, 0));
    }

    @Test
    void aBrokerOutOfTheRouteIsKeptAwayForARoutePoll() {
        assertEquals(31_000, DecisionView.heldUntil(BrokerDecision.State.OUT_OF_ROUTE, 1_000, 1_000, 2_000, false, HOLD, MAX));
        assertEquals(35_000, DecisionView.heldUntil(BrokerDecision.State.OUT_OF_ROUTE, 1_000, 1_000, 5_000, true, HOLD, MAX));
        assertEquals(0, DecisionView.heldUntil(BrokerDecision.State.AVAILABLE, 1_000, 1_000, 5_000, true, HOLD, MAX));
    }

    @Test
    void nothingIsHeldLongerThanTheMaximumFromWhenItWasRead() {
        long year = 365L * 24 * 3600 * 1000;
        assertEquals(2_000 + MAX, DecisionView.heldUntil(BrokerDecision.State.ISOLATED, 1_000, year, 2_000, true, HOLD, MAX));
    }

    @Test
    void theLatestMessageOfABrokerDecides() {
        DecisionView view = new DecisionView(HOLD, MAX);
        BrokerDecision d = view.apply("broker/C/b", message("b", "ISOLATE", "ISOLATED", 1_000, 11_000), 1_100, true);
        assertEquals(BrokerDecision.State.ISOLATED, d.state());
        assertFalse(view.isAvailable("C", "b", 5_000, 0));
        assertTrue(view.isAvailable("C", "a", 5_000, 0));  // never decided about: available
        assertTrue(view.isAvailable("D", "b", 5_000, 0));  // another cluster's broker of that name
        view.apply("broker/C/b", message("b", "RESTORE", "AVAILABLE", 4_000, 4_000), 4_100, true);
        assertTrue(view.isAvailable("C", "b", 5_000, 0));
        view.apply("broker/C/b", null, 6_000, true);  // a tombstone forgets the broker
        assertNull(view.get("C", "b"));
    }

    @Test
    void theRouteAndTheFaultItemAreTwoStatesAndNeitherEndsTheOther() {
        DecisionView view = new DecisionView(HOLD, MAX);
        view.apply("broker/C/b", message("b", "EXTEND", "ISOLATED", 1_000, 11_000), 1_000, true);
        view.apply("broker-route/C/b", message("b", "ROUTE_RESTORED", "AVAILABLE", 2_000, 2_000), 2_000, true);
        assertFalse(view.isAvailable("C", "b", 5_000, 0));  // back in the route, still isolated
        assertEquals(11_000, view.blockedUntil("C", "b", 5_000, 1_000));
        view.apply("broker-route/C/b", message("b", "ROUTE_EXPIRED", "OUT_OF_ROUTE", 12_000, 12_000), 12_000, true);
        view.apply("broker/C/b", message("b", "PROBE", "PROBING", 13_000, 23_000).replace("}", ",\"share\":0.5}"), 13_000, true);
        for (long ticket = 0; ticket < 100; ticket++) {
            assertFalse(view.isAvailable("C", "b", 14_000, ticket));  // a probation does not bring it back
        }
        assertFalse(view.isAvailable("C", "b", 14_000));
        assertEquals(42_000, view.blockedUntil("C", "b", 14_000, 1_000));  // a route poll from when it was read
        assertSame(view.route("C", "b"), view.deciding("C", "b", 14_000, 1_000));
        view.apply("broker-route/C/b", null, 15_000, true);  // a tombstone forgets the route's word only
        assertNull(view.route("C", "b"));
        assertEquals("PROBE", view.get("C", "b").decision());
        assertEquals(1, view.decisions("C").size());
        assertTrue(view.routes("C").isEmpty());
    }

    @Test
    void theSameDecisionAgainKeepsWhenItWasFirstRead() {
        DecisionView view = new DecisionView(HOLD, MAX);
        String m = message("b", "ISOLATE", "ISOLATED", 1_000, 11_000);
        BrokerDecision first = view.apply("broker/C/b", m, 1_100, true);
        assertSame(first, view.apply("broker/C/b", m, 9_000, true));  // the job's replay publishes again
        assertEquals(11_100, view.get("C", "b").heldUntil());
    }

    @Test
    void aMessageWithoutStateTakesItFromItsDecision() {
        DecisionView view = new DecisionView(HOLD, MAX);
        assertEquals(BrokerDecision.State.ISOLATED, view.apply("broker/C/b", message("b", "OUTLIER", null, 1_000, 31_000), 1_000, true).state());
        assertEquals(BrokerDecision.State.AVAILABLE, view.apply("broker/C/b", message("b", "PANIC", null, 2_000, 2_000), 2_000, true).state());
        assertEquals(BrokerDecision.State.OUT_OF_ROUTE, view.apply("broker/C/b", message("b", "ROUTE_EXPIRED", null, 3_000, 3_000), 3_000, true).state());
    }

    @Test
    void whatIsNoBrokerStateIsSkippedNeverGuessed() {
        DecisionView view = new DecisionView(HOLD, MAX);
        assertNull(view.apply("broker/C/b", message("b", "QUEUE_SWAP", null, 1_000, 1_000), 1_000, true));
        assertNull(view.apply("broker/C/b", message("b", "ISOLATE", "SLEEPY", 1_000, 9_000), 1_000, true));
        assertNull(view.apply("broker/C/b", "{not json", 1_000, true));
        assertNull(view.apply("broker/C/b", message("b", "ISOLATE", "ISOLATED", 1_000, 9_000).replace("\"scope\":\"cluster\"", "\"scope\":\"producer\""), 1_000, true));
        assertEquals(4, view.skipped());
        assertNull(view.apply("route/C/t", "{\"selectable\":[]}", 1_000, true));  // not about a broker
        assertTrue(view.decisions("C").isEmpty());
    }

    @Test
    void aProbationSpreadsItsShareOverConsecutiveTickets() {
        DecisionView view = new DecisionView(HOLD, MAX);
        view.apply("broker/C/b", message("b", "PROBE", "PROBING", 1_000, 11_000).replace("}", ",\"share\":0.25}"), 1_000, true);
        int open = 0;
        for (long ticket = 0; ticket < 1_000; ticket++) {
            open += view.isAvailable("C", "b", 2_000, ticket) ? 1 : 0;
        }
        assertEquals(250, open, 2);
        assertTrue(view.isAvailable("C", "b", 11_000, 7));  // over: every send
    }

    @Test
    void aProbationHoldsTheBrokerForTheRestOfEachPeriod() {
        DecisionView view = new DecisionView(HOLD, MAX);
        BrokerDecision d = view.apply("broker/C/b", message("b", "PROBE", "PROBING", 1_000, 5_000).replace("}", ",\"share\":0.25}"), 1_000, true);
        assertEquals(0, d.blockedUntil(1_100, 1_000));      // the first quarter of each second: open
        assertEquals(2_000, d.blockedUntil(1_300, 1_000));  // the rest: held to the period's end
        assertEquals(0, d.blockedUntil(2_200, 1_000));
        assertEquals(3_000, d.blockedUntil(2_900, 1_000));
        assertEquals(0, d.blockedUntil(5_500, 1_000));      // over
        // the follower writes each hold when the open quarter ends, not at its next round
        assertEquals(1_250, d.nextClosing(1_100, 1_000));
        assertEquals(2_250, d.nextClosing(1_300, 1_000));
        assertEquals(Long.MAX_VALUE, d.nextClosing(4_300, 1_000));  // ends before it would close
    }

    @Test
    void theDecisionsOfAClusterAreACopyThatCannotBeChanged() {
        DecisionView view = new DecisionView(HOLD, MAX);
        view.apply("broker/C/b", message("b", "ISOLATE", "ISOLATED", 1_000, 11_000), 1_000, true);
        Map<String, BrokerDecision> d = view.decisions("C");
        view.apply("broker/C/a", message("a", "ISOLATE", "ISOLATED", 1_000, 11_000), 1_000, true);
        assertEquals(1, d.size());
        try {
            d.clear();
            throw new AssertionError("changed");
        } catch (UnsupportedOperationException expected) {
            // immutable
        }
    }
}
