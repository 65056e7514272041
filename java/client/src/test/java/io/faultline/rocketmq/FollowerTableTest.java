package io.faultline.rocketmq;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What the follower writes into a real (unstarted) producer's fault table, rocketmq-client 4.9.7:
 * the end-to-end tests run each client version against a real cluster.
 */
class FollowerTableTest {
    private DefaultMQProducer producer;
    private FaultlineFollower follower;
    private ProducerFaultTable table;

    @BeforeEach
    void setUp() throws Exception {
        producer = new DefaultMQProducer("faultline-test");
        producer.setSendLatencyFaultEnable(true);
        // never started: only its table is used (nothing listens on port 1)
        follower = FaultlineFollower.builder("127.0.0.1:1").cluster("C").build();
        assertTrue(follower.follow(producer));
        table = new ProducerFaultTable(producer);
    }

    @AfterEach
    void tearDown() {
        follower.close();
    }

    private void read(String broker, String decision, String state, long effectiveAt, long availableFrom, long seenAt) {
        follower.view().apply("broker/C/" + broker,
            DecisionViewTest.message(broker, decision, state, effectiveAt, availableFrom), seenAt, true);
    }

    @Test
    void anIsolationHoldsTheBrokerInTheProducersTableUntilItEnds() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        follower.applyAt(now);
        assertEquals(now + 60_000, table.availableFrom("b"));
        assertEquals(Long.MIN_VALUE, table.availableFrom("a"));
        read("b", "RESTORE", "AVAILABLE", now + 1, now + 1, now + 1);
        follower.applyAt(now + 1);
        assertEquals(now + 1, table.availableFrom("b"));  // available at once
    }

    @Test
    void aDecisionNotHeardOfAgainIsLetGoAtItsEnd() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        follower.applyAt(now);
        long written = follower.status().holdsWritten;
        follower.applyAt(now + 60_000);
        assertTrue(table.availableFrom("b") <= now + 60_000);
        // past its end nothing of faultline's is held again: the producer's own answer stands
        producer.getDefaultMQProducerImpl().updateFaultItem("b", 3, false);
        long own = table.availableFrom("b");
        follower.applyAt(now + 60_010);
        assertEquals(own, table.availableFrom("b"));
        assertEquals(written, follower.status().holdsWritten);
    }

    @Test
    void theProducersOwnOverwriteIsHeldAgain() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        follower.applyAt(now);
        // RocketMQ 4.x: a fast answer from b makes it available at once
        producer.getDefaultMQProducerImpl().updateFaultItem("b", 3, false);
        assertTrue(table.availableFrom("b") < now + 60_000);
        follower.applyAt(now + 10);
        assertEquals(now + 60_000, table.availableFrom("b"));
    }

    @Test
    void theProducersOwnLongerIsolationIsKept() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 5_000, now);
        follower.applyAt(now);
        producer.getDefaultMQProducerImpl().updateFaultItem("b", 3_000, true);  // its own: 600 s
        long own = table.availableFrom("b");
        assertTrue(own > now + 500_000);
        read("b", "RESTORE", "AVAILABLE", now + 1, now + 1, now + 1);
        follower.applyAt(now + 1);
        assertEquals(own, table.availableFrom("b"));  // faultline's restore is not the producer's
    }

    @Test
    void aShortenedIsolationIsWrittenExactly() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        follower.applyAt(now);
        read("b", "SHORTEN", "ISOLATED", now + 1, now + 20_000, now + 1);
        follower.applyAt(now + 1);
        assertEquals(now + 20_000, table.availableFrom("b"));
    }

    @Test
    void closingLetsGoOfEverythingFaultlineHolds() throws Exception {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        follower.applyAt(now);
        assertFalse(table.availableFrom("b") <= System.currentTimeMillis());
        follower.close();
        assertTrue(table.availableFrom("b") <= System.currentTimeMillis());
    }

    @Test
    void theReadApiAnswersFromTheDecisions() {
        long now = System.currentTimeMillis();
        read("b", "ISOLATE", "ISOLATED", now, now + 60_000, now);
        assertFalse(follower.isAvailable("b"));
        assertTrue(follower.isAvailable("a"));
        assertTrue(follower.isAvailable("D", "b"));
        assertEquals(1, follower.decisions().size());
        assertTrue(follower.held().contains("b"));
    }

    @Test
    void theListenerIsToldOfEveryWriteWithItsDecision() throws Exception {
        List<String> told = new ArrayList<>();
        FaultlineFollower listened = FaultlineFollower.builder("127.0.0.1:1").cluster("C")
            .listener((p, broker, d, until, at) -> told.add((p == producer) + " " + broker + " "
                + (d == null ? "-" : d.decision()) + " " + until + " " + at))
            .build();
        try {
            follower.close();  // the setUp's follower lets go of the producer
            assertTrue(listened.follow(producer));
            long now = System.currentTimeMillis();
            listened.view().apply("broker/C/b",
                DecisionViewTest.message("b", "ISOLATE", "ISOLATED", now, now + 60_000), now, true);
            listened.applyAt(now);
            listened.applyAt(now + 5);  // nothing changed: nothing told
            // RocketMQ 4.x: a fast answer from b makes it available; held again, and told again
            producer.getDefaultMQProducerImpl().updateFaultItem("b", 3, false);
            listened.applyAt(now + 10);
            listened.view().apply("broker/C/b",
                DecisionViewTest.message("b", "RESTORE", "AVAILABLE", now + 20, now + 20), now + 20, true);
            listened.applyAt(now + 20);
            assertEquals(java.util.Arrays.asList(
                "true b ISOLATE " + (now + 60_000) + " " + now,
                "true b ISOLATE " + (now + 60_000) + " " + (now + 10),
                "true b RESTORE " + (now + 20) + " " + (now + 20)), told);
            assertEquals(now + 20, table.availableFrom("b"));
        } finally {
            listened.close();
        }
    }

    @Test
    void aListenerThatThrowsChangesNothing() throws Exception {
        FaultlineFollower listened = FaultlineFollower.builder("127.0.0.1:1").cluster("C")
            .listener((p, broker, d, until, at) -> {
                throw new IllegalStateException("listener");
            })
            .build();
        try {
            follower.close();
            assertTrue(listened.follow(producer));
            long now = System.currentTimeMillis();
            listened.view().apply("broker/C/b",
                DecisionViewTest.message("b", "ISOLATE", "ISOLATED", now, now + 60_000), now, true);
            listened.applyAt(now);
            assertEquals(now + 60_000, table.availableFrom("b"));
        } finally {
            listened.close();
        }
    }
}
