// QuartzNext computes reference fire times with Quartz's own CronExpression, for the
// quartz-dialect test data of axe's lib/cron package. It is run once by hand (see
// README.md) and its output is committed; the Go tests never run Java.
//
// Input (stdin): the lines of cases.txt. A line is
//     ZONE <TAB> START <TAB> EXPRESSION
// with START an RFC 3339 instant. Blank lines and lines starting with # are skipped.
// Output (stdout): one line per case,
//     ZONE <TAB> START <TAB> EXPRESSION <TAB> RESULT
// where RESULT is the next three fire times after START, comma separated, each as an
// ISO-8601 instant with the zone's offset; or "refused: <Quartz's message>" when
// CronExpression does not accept the expression.
import java.text.ParseException;
import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.TimeZone;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.quartz.CronExpression;

public class QuartzNext {
    static final int FIRES = 3;

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank() || line.startsWith("#")) {
                continue;
            }
            String[] f = line.split("\t", 3);
            String zone = f[0], start = f[1], expr = f[2];
            System.out.println(zone + "\t" + start + "\t" + expr + "\t" + next(zone, start, expr));
        }
    }

    static String next(String zone, String start, String expr) {
        CronExpression ce;
        try {
            ce = new CronExpression(expr);
        } catch (ParseException e) {
            return "refused: " + e.getMessage().replace('\t', ' ').replace('\n', ' ');
        }
        ce.setTimeZone(TimeZone.getTimeZone(zone));
        ZoneId zid = ZoneId.of(zone);
        Date d = Date.from(Instant.parse(start));
        List<String> out = new ArrayList<>();
        for (int i = 0; i < FIRES; i++) {
            d = ce.getNextValidTimeAfter(d);
            if (d == null) {
                break;
            }
            out.add(DateTimeFormatter.ISO_OFFSET_DATE_TIME.format(d.toInstant().atZone(zid)));
        }
        return out.isEmpty() ? "none" : String.join(",", out);
    }
}
